"""load_inline with helpers, a hashed build directory, scratch tensors and .item().

In the style of published solutions: helper functions in the C++ source, a build directory named
with hashlib under os.environ's TMPDIR, scratch allocated with torch.zeros(...).to(x.device), and
the scalar parameters read with .item() and passed to the kernel as floats.

Task: tasks/scaled_shift.py
Devices: cpu
Expect: accept
"""

import hashlib
import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

namespace {
inline float affine(float v, float scale, float shift) { return v * scale + shift; }

float row_l1(const float* row, int64_t cols, float scale, float shift) {
  float acc = 0.0f;
  for (int64_t c = 0; c < cols; ++c) acc += std::fabs(affine(row[c], scale, shift));
  return acc;
}
}  // namespace

torch::Tensor scaled_shift(torch::Tensor x, torch::Tensor norms, double scale, double shift) {
  TORCH_CHECK(x.is_contiguous() && norms.numel() == x.size(0));
  const int64_t rows = x.size(0), cols = x.size(1);
  const float s = static_cast<float>(scale), t = static_cast<float>(shift);
  auto out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* n = norms.data_ptr<float>();
  float* o = out.data_ptr<float>();
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    n[r] = row_l1(in + r * cols, cols, s, t);
    for (int64_t c = 0; c < cols; ++c) o[r * cols + c] = affine(in[r * cols + c], s, t) / n[r];
  }
  return out;
}
"""


def _build_directory() -> str:
    digest = hashlib.sha256(CPP_SOURCE.encode()).hexdigest()[:16]
    root = os.environ.get("TMPDIR") or tempfile.gettempdir()
    path = os.path.join(root, f"frc_scaled_shift_{digest}")
    os.makedirs(path, exist_ok=True)
    return path


ext = load_inline(
    name="frc_scaled_shift",
    cpp_sources=CPP_SOURCE,
    functions=["scaled_shift"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    build_directory=_build_directory(),
)


class ModelNew(nn.Module):
    def forward(self, x):
        norms = torch.zeros(x.shape[0]).to(x.device)  # scratch the kernel fills
        return ext.scaled_shift(x.contiguous(), norms, self.scale.item(), self.shift.item())
