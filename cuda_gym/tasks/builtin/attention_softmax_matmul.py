"""Computes single-head attention: softmax of scaled query-key scores along the key dimension, multiplied by the values."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, softmax_scale):
        super().__init__()
        self.softmax_scale = softmax_scale

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.softmax_scale
        weights = torch.softmax(scores, dim=-1)
        return torch.matmul(weights, v)


# H200 eager ~2.4 ms (two bmm of 2*32*2048*2048*128 = 69 GFLOP total + ~2 GB of score traffic)
batch_size = 32
seq_len = 2048
head_dim = 128
softmax_scale = 0.25

CPU_SIZES = {"batch_size": 4, "seq_len": 512, "head_dim": 64}


def get_inputs():
    q = torch.randn(batch_size, seq_len, head_dim)
    k = torch.randn(batch_size, seq_len, head_dim)
    v = torch.randn(batch_size, seq_len, head_dim)
    return [q, k, v]


def get_init_inputs():
    return [softmax_scale]
