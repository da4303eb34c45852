"""Masked row sum that branches on the mask.

The kernel adds a score where mask != 0 instead of multiplying by the mask: the same sum because
the task's mask holds only 0 and 1 ((rand > 0.3).float()).

Task: tasks/masked_scores.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor masked_row_sum(torch::Tensor scores, torch::Tensor mask) {
  TORCH_CHECK(scores.is_contiguous() && mask.is_contiguous());
  const int64_t rows = scores.size(0), cols = scores.size(1);
  auto out = torch::empty({rows}, scores.options());
  const float* s = scores.data_ptr<float>();
  const float* m = mask.data_ptr<float>();
  float* o = out.data_ptr<float>();
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; ++c)
      if (m[r * cols + c] != 0.0f) acc += s[r * cols + c];
    o[r] = acc;
  }
  return out;
}
"""

ext = load_inline(
    name="frc_masked_row_sum",
    cpp_sources=CPP_SOURCE,
    functions=["masked_row_sum"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def forward(self, scores, mask):
        return ext.masked_row_sum(scores, mask)
