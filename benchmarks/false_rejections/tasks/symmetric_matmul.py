"""Matrix product of two symmetric matrices (KernelBench level 1, 13)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


N = 256


def get_inputs():
    A = torch.randn(N, N)
    A = (A + A.T) / 2
    B = torch.randn(N, N)
    B = (B + B.T) / 2
    return [A, B]


def get_init_inputs():
    return []
