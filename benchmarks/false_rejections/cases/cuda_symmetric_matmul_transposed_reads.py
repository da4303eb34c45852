"""CUDA symmetric matmul that reads A by columns.

Each thread computes C[i][j] as sum over k of A[k][i] B[k][j]: A^T B, equal to A B because the
task's inputs are symmetric, with coalesced reads of both operands along j and i.

Task: tasks/symmetric_matmul.py
Devices: cuda
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void sym_matmul_kernel(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || j >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += a[k * n + i] * b[k * n + j];
  c[i * n + j] = acc;
}

torch::Tensor sym_matmul(torch::Tensor A, torch::Tensor B) {
  TORCH_CHECK(A.is_cuda() && A.is_contiguous() && B.is_contiguous());
  const int n = A.size(0);
  auto C = torch::empty({n, n}, A.options());
  dim3 block(16, 16), grid((n + 15) / 16, (n + 15) / 16);
  sym_matmul_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
      A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), n);
  return C;
}
"""
CPP_SOURCE = "torch::Tensor sym_matmul(torch::Tensor A, torch::Tensor B);"

ext = load_inline(
    name="frc_cuda_sym_matmul",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["sym_matmul"],
)


class ModelNew(nn.Module):
    def forward(self, A, B):
        return ext.sym_matmul(A, B)
