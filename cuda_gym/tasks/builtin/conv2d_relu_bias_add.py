"""Applies a 3x3 2D convolution, then ReLU, then adds a learned per-channel bias."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


# H200 eager ~3.2 ms (2*48*128*126*126*64*9 = 112 GFLOP at ~40 TFLOP/s + ~2 GB epilogue traffic)
# (cuDNN allows TF32 for conv by default, which can make the conv itself ~4x faster)
batch_size = 48
in_channels = 64
out_channels = 128
height = 128
width = 128
kernel_size = 3

CPU_SIZES = {"batch_size": 4, "in_channels": 32, "out_channels": 64, "height": 64, "width": 64}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
