"""Product of two lower triangular matrices, kept lower triangular (KernelBench L1 15)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.tril(torch.matmul(A, B))


M = 256


def get_inputs():
    A = torch.tril(torch.randn(M, M))
    B = torch.tril(torch.randn(M, M))
    return [A, B]


def get_init_inputs():
    return []
