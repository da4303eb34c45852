"""Bucketize by binary search over sorted boundaries.

The kernel finds each value's bucket by bisection, which is right only because the task's
boundaries are sorted (torch.sort), as torch.searchsorted requires too.

Task: tasks/bucketize_sorted.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor bucketize(torch::Tensor boundaries, torch::Tensor values) {
  TORCH_CHECK(boundaries.is_contiguous() && values.is_contiguous());
  const int64_t nb = boundaries.numel(), n = values.numel();
  auto out = torch::empty({n}, values.options().dtype(torch::kInt64));
  const float* b = boundaries.data_ptr<float>();
  const float* v = values.data_ptr<float>();
  int64_t* o = out.data_ptr<int64_t>();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    int64_t lo = 0, hi = nb;  // first index with b[index] >= v[i]
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (b[mid] < v[i]) lo = mid + 1; else hi = mid;
    }
    o[i] = lo;
  }
  return out;
}
"""

ext = load_inline(
    name="frc_bucketize",
    cpp_sources=CPP_SOURCE,
    functions=["bucketize"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def forward(self, boundaries, values):
        return ext.bucketize(boundaries, values)
