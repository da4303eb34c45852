"""Softplus activation (KernelBench level 1, 29)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.softplus(x)


batch = 256
dim = 4096


def get_inputs():
    return [torch.randn(batch, dim)]


def get_init_inputs():
    return []
