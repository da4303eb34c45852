"""Two outputs from one pass, returned as a tuple.

One kernel computes each row's mean and maximum and returns both tensors (std::vector in C++,
a tuple in Python), as the task's forward does.

Task: tasks/row_stats.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <algorithm>
#include <vector>

std::vector<torch::Tensor> row_stats(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous());
  const int64_t rows = x.size(0), cols = x.size(1);
  auto mean = torch::empty({rows}, x.options());
  auto top = torch::empty({rows}, x.options());
  const float* in = x.data_ptr<float>();
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0.0f, best = in[r * cols];
    for (int64_t c = 0; c < cols; ++c) {
      acc += in[r * cols + c];
      best = std::max(best, in[r * cols + c]);
    }
    mean.data_ptr<float>()[r] = acc / static_cast<float>(cols);
    top.data_ptr<float>()[r] = best;
  }
  return {mean, top};
}
"""

ext = load_inline(
    name="frc_row_stats",
    cpp_sources=CPP_SOURCE,
    functions=["row_stats"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        mean, top = ext.row_stats(x)
        return mean, top
