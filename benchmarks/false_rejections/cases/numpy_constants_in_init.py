"""NumPy for the constants, in __init__ only.

`np.sqrt` for the scale and `np.arange` for an offset buffer; forward calls its own C++ kernel
with them and never touches NumPy.

Task: tasks/scaled_offset.py
Devices: cpu
Expect: accept
"""

import numpy as np
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor scale_add(torch::Tensor x, torch::Tensor offset, double scale) {
  x = x.contiguous(); offset = offset.contiguous();
  auto out = torch::empty_like(x);
  const int64_t rows = x.size(0), cols = x.size(1);
  const float* px = x.data_ptr<float>();
  const float* po = offset.data_ptr<float>();
  float* y = out.data_ptr<float>();
  const float s = static_cast<float>(scale);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = px[r * cols + c] / s + po[c];
  return out;
}
"""

ext = load_inline(
    name="false_rejection_numpy_init", cpp_sources=CPP_SOURCE, functions=["scale_add"]
)


class ModelNew(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.scale = float(np.sqrt(d))
        self.register_buffer("offset", torch.from_numpy(np.arange(d, dtype=np.float32)))

    def forward(self, x):
        return ext.scale_add(x, self.offset.to(x.device), self.scale)
