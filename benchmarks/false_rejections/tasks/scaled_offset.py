"""Scale by 1/sqrt(d) and add the column index: x / sqrt(d) + arange(d)."""

import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d

    def forward(self, x):
        return x / math.sqrt(self.d) + torch.arange(self.d, dtype=x.dtype, device=x.device)


batch = 16
d = 64


def get_inputs():
    return [torch.randn(batch, d)]


def get_init_inputs():
    return [d]
