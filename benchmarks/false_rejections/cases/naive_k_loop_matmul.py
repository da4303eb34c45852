"""Naive matmul accumulating K = 16384 products in order.

Each output element is one fp32 dot product summed k = 0..K-1, no blocking, no split-K: the
textbook triple loop, whose rounding error grows with K.

Task: tasks/matmul_long_k.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor naive_matmul(torch::Tensor A, torch::Tensor B) {
  TORCH_CHECK(A.is_contiguous() && B.is_contiguous());
  const int64_t m = A.size(0), k = A.size(1), n = B.size(1);
  auto C = torch::empty({m, n}, A.options());
  const float* a = A.data_ptr<float>();
  const float* b = B.data_ptr<float>();
  float* c = C.data_ptr<float>();
#pragma omp parallel for collapse(2)
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += a[i * k + p] * b[p * n + j];
      c[i * n + j] = acc;
    }
  return C;
}
"""

ext = load_inline(
    name="frc_naive_matmul",
    cpp_sources=CPP_SOURCE,
    functions=["naive_matmul"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def forward(self, A, B):
        return ext.naive_matmul(A, B)
