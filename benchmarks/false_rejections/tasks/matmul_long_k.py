"""Matrix product with a long inner dimension (K = 16384) on small M and N."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


M = 32
N = 32
K = 16384


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_init_inputs():
    return []
