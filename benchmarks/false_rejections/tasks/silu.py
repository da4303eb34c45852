"""SiLU (Swish) activation, x * sigmoid(x) (KernelBench level 1, 21 and 20)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


batch = 256
dim = 4096


def get_inputs():
    return [torch.randn(batch, dim)]


def get_init_inputs():
    return []
