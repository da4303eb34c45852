"""A transposed input made contiguous in forward.

The task's input is a transposed view; forward calls .contiguous() (a copy, allowed) and the
kernel then walks rows with unit stride.

Task: tasks/transposed_scale_add.py
Devices: cpu
Expect: accept
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor scale_add(torch::Tensor x, torch::Tensor bias) {
  TORCH_CHECK(x.is_contiguous() && bias.is_contiguous());
  const int64_t rows = x.size(0), cols = x.size(1);
  auto out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  float* o = out.data_ptr<float>();
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) o[r * cols + c] = in[r * cols + c] * 2.0f + b[c];
  return out;
}
"""

ext = load_inline(
    name="frc_scale_add",
    cpp_sources=CPP_SOURCE,
    functions=["scale_add"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return ext.scale_add(x.contiguous(), self.bias)
