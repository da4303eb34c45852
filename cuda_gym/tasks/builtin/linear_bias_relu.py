"""Applies a fully connected layer (matmul plus bias) followed by ReLU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x):
        return torch.relu(self.linear(x))


# H200 eager ~3.4 ms (2 * 4096 * 4096 * 4096 = 137 GFLOP fp32 at ~40 TFLOP/s; epilogue negligible)
batch_size = 4096
in_features = 4096
out_features = 4096

CPU_SIZES = {"batch_size": 512, "in_features": 1024, "out_features": 512}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
