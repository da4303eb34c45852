"""SiLU with a hand-rolled exp, built with -ffast-math.

exp(x) = 2^k p(r) with a degree-6 polynomial on r in [-ln2/2, ln2/2] (a few ulps, like the GPU's
__expf), and the division by 1 + exp(-x) under -ffast-math's reciprocal approximations.

Task: tasks/silu.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

static inline float fast_exp(float x) {
  x = std::fmin(88.0f, std::fmax(-87.0f, x));
  const float k = std::nearbyint(x * 1.44269504f);
  const float r = x - k * 0.693145752f - k * 1.42860677e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return std::ldexp(p, static_cast<int>(k));
}

torch::Tensor silu(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous());
  auto out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = x.numel();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) o[i] = in[i] / (1.0f + fast_exp(-in[i]));
  return out;
}
"""

ext = load_inline(
    name="frc_fast_math_silu",
    cpp_sources=CPP_SOURCE,
    functions=["silu"],
    extra_cflags=["-O3", "-ffast-math", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.silu(x)
