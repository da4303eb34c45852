"""Symmetric matmul that reads A by columns.

The kernel computes C = A^T B, reading A[k][i] where the product needs A[i][k]: the same matrix
because the task's inputs are symmetric, and a unit-stride walk of both operands.

Task: tasks/symmetric_matmul.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor sym_matmul(torch::Tensor A, torch::Tensor B) {
  TORCH_CHECK(A.is_contiguous() && B.is_contiguous());
  const int64_t n = A.size(0);
  auto C = torch::zeros({n, n}, A.options());
  const float* a = A.data_ptr<float>();
  const float* b = B.data_ptr<float>();
  float* c = C.data_ptr<float>();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    float* row = c + i * n;
    for (int64_t k = 0; k < n; ++k) {
      const float aik = a[k * n + i];  // A[k][i] == A[i][k]
      const float* brow = b + k * n;
      for (int64_t j = 0; j < n; ++j) row[j] += aik * brow[j];
    }
  }
  return C;
}
"""

ext = load_inline(
    name="frc_sym_matmul",
    cpp_sources=CPP_SOURCE,
    functions=["sym_matmul"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def forward(self, A, B):
        return ext.sym_matmul(A, B)
