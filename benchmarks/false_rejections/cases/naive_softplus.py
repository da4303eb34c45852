"""Softplus written as log(1 + exp(x)).

No threshold and no log1p: exact enough for the task's torch.randn inputs, which never come near
exp's overflow at 88.

Task: tasks/softplus.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor softplus(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous());
  auto out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = x.numel();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) o[i] = std::log(1.0f + std::exp(in[i]));
  return out;
}
"""

ext = load_inline(
    name="frc_naive_softplus",
    cpp_sources=CPP_SOURCE,
    functions=["softplus"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.softplus(x)
