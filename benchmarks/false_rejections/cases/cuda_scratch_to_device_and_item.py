"""CUDA build with a hashed build directory, CPU scratch moved by .to(device), and .item().

As KernelBench's flash-attention example does: scratch made with torch.zeros on the CPU and
moved with .to(x.device) (aten._to_copy, allowed), scalar parameters read with .item(), helpers
in the CUDA source, and a build directory named with hashlib and os.

Task: tasks/scaled_shift.py
Devices: cuda
Expect: accept
"""

import hashlib
import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__device__ __forceinline__ float affine(float v, float s, float t) { return v * s + t; }

__global__ void row_l1_kernel(const float* x, float* norms, int cols, float s, float t) {
  const int r = blockIdx.x;
  if (threadIdx.x != 0) return;
  float acc = 0.0f;
  for (int c = 0; c < cols; ++c) acc += fabsf(affine(x[r * cols + c], s, t));
  norms[r] = acc;
}

__global__ void divide_kernel(const float* x, const float* norms, float* out, int cols,
                              float s, float t) {
  const int r = blockIdx.x;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    out[r * cols + c] = affine(x[r * cols + c], s, t) / norms[r];
}

torch::Tensor scaled_shift(torch::Tensor x, torch::Tensor norms, double scale, double shift) {
  TORCH_CHECK(x.is_cuda() && norms.is_cuda() && x.is_contiguous());
  const int rows = x.size(0), cols = x.size(1);
  auto out = torch::empty_like(x);
  auto stream = at::cuda::getCurrentCUDAStream();
  row_l1_kernel<<<rows, 32, 0, stream>>>(x.data_ptr<float>(), norms.data_ptr<float>(), cols,
                                         (float)scale, (float)shift);
  divide_kernel<<<rows, 256, 0, stream>>>(x.data_ptr<float>(), norms.data_ptr<float>(),
                                          out.data_ptr<float>(), cols, (float)scale,
                                          (float)shift);
  return out;
}
"""
CPP_SOURCE = (
    "torch::Tensor scaled_shift(torch::Tensor x, torch::Tensor norms, double scale, double shift);"
)


def _build_directory() -> str:
    digest = hashlib.sha256(CUDA_SOURCE.encode()).hexdigest()[:16]
    root = os.environ.get("TMPDIR") or tempfile.gettempdir()
    path = os.path.join(root, f"frc_cuda_scaled_shift_{digest}")
    os.makedirs(path, exist_ok=True)
    return path


ext = load_inline(
    name="frc_cuda_scaled_shift",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["scaled_shift"],
    build_directory=_build_directory(),
)


class ModelNew(nn.Module):
    def forward(self, x):
        norms = torch.zeros(x.shape[0]).to(x.device)  # made on the CPU, moved: aten._to_copy
        return ext.scaled_shift(x.contiguous(), norms, self.scale.item(), self.shift.item())
