"""Upper triangular matmul that skips the zero halves.

For C[i][j] the kernel sums only k in [i, j]: A[i][k] is zero for k < i and B[k][j] for k > j,
as the task's get_inputs() guarantees (torch.triu). It writes zeros below the diagonal.

Task: tasks/triu_matmul.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor triu_matmul(torch::Tensor A, torch::Tensor B) {
  TORCH_CHECK(A.scalar_type() == torch::kFloat32 && A.is_contiguous() && B.is_contiguous());
  const int64_t n = A.size(0);
  auto C = torch::empty({n, n}, A.options());
  const float* a = A.data_ptr<float>();
  const float* b = B.data_ptr<float>();
  float* c = C.data_ptr<float>();
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) c[i * n + j] = 0.0f;
    for (int64_t j = i; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t k = i; k <= j; ++k) acc += a[i * n + k] * b[k * n + j];
      c[i * n + j] = acc;
    }
  }
  return C;
}
"""

ext = load_inline(
    name="frc_triu_matmul",
    cpp_sources=CPP_SOURCE,
    functions=["triu_matmul"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def forward(self, A, B):
        return ext.triu_matmul(A.contiguous(), B.contiguous())
