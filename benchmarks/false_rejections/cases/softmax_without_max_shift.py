"""Softmax without the max shift, for logits known to lie in [0, 10].

The kernel exponentiates the logits directly (no running max): exp(10) is far from overflow, and
the task's logits come from torch.rand(...) * 10. Rows are summed left to right.

Task: tasks/softmax_bounded_logits.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor softmax_rows(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous());
  const int64_t rows = x.size(0), cols = x.size(1);
  auto out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    float total = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float e = std::exp(in[r * cols + c]);
      o[r * cols + c] = e;
      total += e;
    }
    const float inv = 1.0f / total;
    for (int64_t c = 0; c < cols; ++c) o[r * cols + c] *= inv;
  }
  return out;
}
"""

ext = load_inline(
    name="frc_softmax_no_shift",
    cpp_sources=CPP_SOURCE,
    functions=["softmax_rows"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def forward(self, logits):
        return ext.softmax_rows(logits)
