"""Left-to-right fp32 sum over 65536 values.

One loop per row adds the values in order into a float accumulator: the plainest correct
reduction, whose rounding error grows with the row length (no pairwise or blocked order).

Task: tasks/long_row_sum.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor row_sum(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous() && x.dim() == 2);
  const int64_t rows = x.size(0), cols = x.size(1);
  auto out = torch::empty({rows}, x.options());
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; ++c) acc += in[r * cols + c];
    o[r] = acc;
  }
  return out;
}
"""

ext = load_inline(name="frc_serial_row_sum", cpp_sources=CPP_SOURCE, functions=["row_sum"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.row_sum(x)
