"""CUDA row sum with one thread adding 65536 values in order.

The plainest correct reduction on a GPU: one thread per row, a float accumulator, left to right;
its rounding error grows with the row length (no tree, no warp shuffles).

Task: tasks/long_row_sum.py
Devices: cuda
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void row_sum_kernel(const float* x, float* out, int rows, long cols) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float acc = 0.0f;
  for (long c = 0; c < cols; ++c) acc += x[r * cols + c];
  out[r] = acc;
}

torch::Tensor row_sum(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dim() == 2);
  const int rows = x.size(0);
  auto out = torch::empty({rows}, x.options());
  row_sum_kernel<<<(rows + 127) / 128, 128, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), rows, x.size(1));
  return out;
}
"""
CPP_SOURCE = "torch::Tensor row_sum(torch::Tensor x);"

ext = load_inline(
    name="frc_cuda_serial_row_sum",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["row_sum"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.row_sum(x)
