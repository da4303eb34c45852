"""A one-layer tanh RNN over a long sequence (KernelBench level 3's recurrent form): a solution
that does not fuse the time loop calls a kernel of its own once per time step."""

import torch
import torch.nn as nn

seq_len = 1024
batch_size = 4
input_size = 32
hidden_size = 32


class Model(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.rnn = nn.RNN(input_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


def get_inputs():
    return [torch.randn(seq_len, batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
