"""Keeps the scores where a 0/1 mask is set and sums each row of what is kept."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, scores, mask):
        return (scores * mask).sum(dim=-1)


batch = 256
length = 512


def get_inputs():
    scores = torch.randn(batch, length)
    mask = (torch.rand(batch, length) > 0.3).float()
    return [scores, mask]


def get_init_inputs():
    return []
