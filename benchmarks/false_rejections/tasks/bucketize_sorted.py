"""Finds each value's bucket among sorted boundaries (searchsorted)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, boundaries, values):
        return torch.searchsorted(boundaries, values)


buckets = 1024
count = 65536


def get_inputs():
    boundaries = torch.sort(torch.randn(buckets)).values
    values = torch.randn(count)
    return [boundaries, values]


def get_init_inputs():
    return []
