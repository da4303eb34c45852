"""Sums each row of 65536 non-negative values (a long reduction)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


batch = 16
length = 65536


def get_inputs():
    return [torch.rand(batch, length)]


def get_init_inputs():
    return []
