"""Product of two upper triangular matrices, kept upper triangular (KernelBench L1 14)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.triu(torch.matmul(A, B))


N = 256


def get_inputs():
    A = torch.triu(torch.randn(N, N))
    B = torch.triu(torch.randn(N, N))
    return [A, B]


def get_init_inputs():
    return []
