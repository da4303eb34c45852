"""A recurrent cell that stores its next hidden state on self, as the task's own forward does.

One C++ function computes the new hidden state and the output; forward rebinds `self.hidden`
to it. The hidden state is drawn in __init__ like the reference's, in another order.

Task: tasks/rnn_cell_state.py
Devices: cpu
Expect: accept
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>
#include <vector>

// hidden' = tanh([x, h] W1^T + b1); out = hidden' W2^T + b2
std::vector<torch::Tensor> cell(torch::Tensor x, torch::Tensor h, torch::Tensor w1,
                                torch::Tensor b1, torch::Tensor w2, torch::Tensor b2) {
  x = x.contiguous(); h = h.contiguous(); w1 = w1.contiguous(); w2 = w2.contiguous();
  const int64_t B = x.size(0), I = x.size(1), H = h.size(1), O = w2.size(0);
  auto next = torch::empty({B, H}, x.options());
  auto out = torch::empty({B, O}, x.options());
  const float *px = x.data_ptr<float>(), *ph = h.data_ptr<float>();
  const float *pw1 = w1.data_ptr<float>(), *pb1 = b1.data_ptr<float>();
  const float *pw2 = w2.data_ptr<float>(), *pb2 = b2.data_ptr<float>();
  float *pn = next.data_ptr<float>(), *po = out.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      const float* row = pw1 + j * (I + H);
      float acc = pb1[j];
      for (int64_t k = 0; k < I; ++k) acc += px[b * I + k] * row[k];
      for (int64_t k = 0; k < H; ++k) acc += ph[b * H + k] * row[I + k];
      pn[b * H + j] = std::tanh(acc);
    }
    for (int64_t o = 0; o < O; ++o) {
      float acc = pb2[o];
      for (int64_t k = 0; k < H; ++k) acc += pn[b * H + k] * pw2[o * H + k];
      po[b * O + o] = acc;
    }
  }
  return {out, next};
}
"""

ext = load_inline(name="false_rejection_rnn_cell", cpp_sources=CPP_SOURCE, functions=["cell"])

batch_size = 4


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super().__init__()
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.hidden = torch.randn((batch_size, hidden_size))

    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        out, self.hidden = ext.cell(
            x, self.hidden, self.i2h.weight, self.i2h.bias, self.h2o.weight, self.h2o.bias
        )
        return out
