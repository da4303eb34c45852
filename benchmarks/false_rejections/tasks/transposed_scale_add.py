"""Scales a transposed (non-contiguous) matrix and adds a bias row."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return x * 2.0 + self.bias


rows = 1024
features = 512


def get_inputs():
    return [torch.randn(features, rows).t()]


def get_init_inputs():
    return [features]
