"""Running fp32 scan along each row.

The kernel keeps one float running sum per row and writes it after every element: an honest
inclusive scan, whereas torch's CPU cumsum accumulates in double.

Task: tasks/running_sum.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor row_scan(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous() && x.dim() == 2);
  const int64_t rows = x.size(0), cols = x.size(1);
  auto out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      acc += in[r * cols + c];
      o[r * cols + c] = acc;
    }
  }
  return out;
}
"""

ext = load_inline(
    name="frc_row_scan",
    cpp_sources=CPP_SOURCE,
    functions=["row_scan"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return ext.row_scan(x)
