"""Cumulative sum along each row (an inclusive scan, KernelBench level 1, 89)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


batch = 32
length = 32768


def get_inputs():
    return [torch.rand(batch, length)]


def get_init_inputs():
    return [1]
