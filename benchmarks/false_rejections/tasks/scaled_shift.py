"""Scales by a learned scalar, adds a learned shift and normalises each row by its L1 norm."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor([1.5]))
        self.shift = nn.Parameter(torch.tensor([0.25]))

    def forward(self, x):
        y = x * self.scale + self.shift
        return y / y.abs().sum(dim=-1, keepdim=True)


batch = 256
dim = 1024


def get_inputs():
    return [torch.randn(batch, dim)]


def get_init_inputs():
    return []
