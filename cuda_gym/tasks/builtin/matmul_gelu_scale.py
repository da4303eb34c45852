"""Multiplies two matrices, applies GELU to the product, and multiplies by a constant scale."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return F.gelu(torch.matmul(a, b)) * self.scale


# H200 eager ~3.5 ms (2 * 4096 * 4096 * 4096 = 137 GFLOP fp32 at ~40 TFLOP/s + ~0.1 ms epilogue)
m_size = 4096
k_size = 4096
n_size = 4096
scale = 0.5

CPU_SIZES = {"m_size": 512, "k_size": 1024, "n_size": 512}


def get_inputs():
    a = torch.randn(m_size, k_size)
    b = torch.randn(k_size, n_size)
    return [a, b]


def get_init_inputs():
    return [scale]
