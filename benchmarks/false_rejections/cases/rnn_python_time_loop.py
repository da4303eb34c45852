"""A recurrent layer whose time loop is Python, one call of its own C++ step per time step.

forward walks 1024 time steps in Python and calls its extension once per step (views of the
input and output rows are its arguments): a thousand calls of its own a forward, each a little
compute and pybind11's dispatch, with the interpreter's loop around them.

Task: tasks/rnn_sequence.py
Devices: cpu
Timing: yes
Expect: accept
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

// out_t = tanh(x_t W_ih^T + b_ih + h W_hh^T + b_hh), one row per batch entry
void rnn_step(torch::Tensor x_t, torch::Tensor h, torch::Tensor w_ih, torch::Tensor w_hh,
              torch::Tensor b_ih, torch::Tensor b_hh, torch::Tensor out_t) {
  const int64_t B = x_t.size(0), I = x_t.size(1), H = w_hh.size(0);
  const float *px = x_t.data_ptr<float>(), *ph = h.data_ptr<float>();
  const float *wi = w_ih.data_ptr<float>(), *wh = w_hh.data_ptr<float>();
  const float *bi = b_ih.data_ptr<float>(), *bh = b_hh.data_ptr<float>();
  float* po = out_t.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      float acc = bi[j] + bh[j];
      for (int64_t k = 0; k < I; ++k) acc += px[b * I + k] * wi[j * I + k];
      for (int64_t k = 0; k < H; ++k) acc += ph[b * H + k] * wh[j * H + k];
      po[b * H + j] = std::tanh(acc);
    }
  }
}
"""

ext = load_inline(
    name="false_rejection_rnn_time_loop", cpp_sources=CPP_SOURCE, functions=["rnn_step"]
)


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.rnn = nn.RNN(input_size, hidden_size)

    def forward(self, x):
        x = x.contiguous()
        rnn = self.rnn
        out = torch.empty(x.shape[0], x.shape[1], rnn.hidden_size, dtype=x.dtype)
        h = torch.zeros(x.shape[1], rnn.hidden_size, dtype=x.dtype)
        for t in range(x.shape[0]):
            step = out[t]
            ext.rnn_step(
                x[t], h, rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0, step
            )
            h = step
        return out
