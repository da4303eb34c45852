"""CUDA upper triangular matmul that skips the zero halves.

One thread per C[i][j] sums only k in [i, j] (torch.triu inputs are zero elsewhere) and writes
zeros below the diagonal; built with load_inline's cuda_sources.

Task: tasks/triu_matmul.py
Devices: cuda
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void triu_matmul_kernel(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || j >= n) return;
  float acc = 0.0f;
  for (int k = i; k <= j; ++k) acc += a[i * n + k] * b[k * n + j];
  c[i * n + j] = j < i ? 0.0f : acc;
}

torch::Tensor triu_matmul(torch::Tensor A, torch::Tensor B) {
  TORCH_CHECK(A.is_cuda() && A.is_contiguous() && B.is_contiguous());
  const int n = A.size(0);
  auto C = torch::empty({n, n}, A.options());
  dim3 block(16, 16), grid((n + 15) / 16, (n + 15) / 16);
  triu_matmul_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
      A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), n);
  return C;
}
"""
CPP_SOURCE = "torch::Tensor triu_matmul(torch::Tensor A, torch::Tensor B);"

ext = load_inline(
    name="frc_cuda_triu_matmul",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["triu_matmul"],
)


class ModelNew(nn.Module):
    def forward(self, A, B):
        return ext.triu_matmul(A.contiguous(), B.contiguous())
