"""SiLU with a vector path picked by the input's alignment and an enum naming the path.

The wrapper reads `x.data_ptr() % 16` (a pointer's alignment, not a cache key) and the C++
names its paths `enum class DispatchMode` and its split `findOptimalChunk`: words that
contain, but are not, the dispatcher's names.

Task: tasks/silu.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

enum class DispatchMode { kScalar = 0, kVector4 = 1 };

static int64_t findOptimalChunk(int64_t n) {
  int64_t chunk = 1024;
  while (chunk * 64 < n) chunk *= 2;
  return chunk;
}

torch::Tensor silu(torch::Tensor x, int64_t mode) {
  TORCH_CHECK(x.is_contiguous());
  auto out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = x.numel();
  const int64_t chunk = findOptimalChunk(n);
  const auto path = static_cast<DispatchMode>(mode);
#pragma omp parallel for
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t end = std::min(n, start + chunk);
    int64_t i = start;
    if (path == DispatchMode::kVector4) {
      for (; i + 4 <= end; i += 4) {
        for (int j = 0; j < 4; ++j) o[i + j] = in[i + j] / (1.0f + std::exp(-in[i + j]));
      }
    }
    for (; i < end; ++i) o[i] = in[i] / (1.0f + std::exp(-in[i]));
  }
  return out;
}
"""

ext = load_inline(
    name="frc_aligned_path_by_pointer",
    cpp_sources=CPP_SOURCE,
    functions=["silu"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        aligned = x.data_ptr() % 16 == 0 and x.numel() % 4 == 0
        return ext.silu(x, 1 if aligned else 0)
