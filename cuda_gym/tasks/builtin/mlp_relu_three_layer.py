"""Applies a three-layer MLP: Linear, ReLU, Linear, ReLU, Linear."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, hidden_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.fc2 = nn.Linear(hidden_features, hidden_features)
        self.fc3 = nn.Linear(hidden_features, out_features)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


# H200 eager ~3.9 ms (2 * 2048 * (4096*4096 + 4096*4096 + 4096*1024) = 155 GFLOP at ~40 TFLOP/s)
batch_size = 2048
in_features = 4096
hidden_features = 4096
out_features = 1024

CPU_SIZES = {"batch_size": 256, "in_features": 512, "hidden_features": 1024, "out_features": 256}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, hidden_features, out_features]
