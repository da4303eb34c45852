"""BatchNorm2d in training mode (KernelBench level 1's BatchNorm form): batch statistics per
channel normalise the output, and the running statistics are updated as a side effect."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)

    def forward(self, x):
        return self.bn(x)


batch_size = 4
features = 8
dim1 = 8
dim2 = 8


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [features]
