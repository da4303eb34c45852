"""Adds a residual tensor to the input and applies layer normalization with learnable affine weight and bias over the last dimension."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size, eps=eps, elementwise_affine=True)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.5 * torch.randn(hidden_size))
            self.norm.bias.copy_(0.5 * torch.randn(hidden_size))

    def forward(self, x, residual):
        return self.norm(x + residual)


# H200 eager ~1.5 ms (add 3 GiB + layer norm read/write 2 GiB over 1 GiB activations, ~5.4 GB)
batch_size = 32
seq_len = 2048
hidden_size = 4096
eps = 1e-5

CPU_SIZES = {"batch_size": 4, "seq_len": 256, "hidden_size": 2048}


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden_size)
    residual = torch.randn(batch_size, seq_len, hidden_size)
    return [x, residual]


def get_init_inputs():
    return [hidden_size, eps]
