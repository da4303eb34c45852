"""An extension named after hash() of its source.

`load_inline(name=f"silu_{abs(hash(SRC)) % 10**8}")` at import: Python salts str hashes per
process, so the build stage and the runner once computed different names and the runner was
refused a compile it had not been asked for (a stranger's report).

Task: tasks/silu.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor silu(torch::Tensor x) {
  auto xc = x.contiguous();
  auto out = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = xc.numel();
  for (int64_t i = 0; i < n; ++i) o[i] = in[i] / (1.0f + std::exp(-in[i]));
  return out;
}
"""

ext = load_inline(name=f"frc_silu_{abs(hash(SRC)) % 10**8}", cpp_sources=SRC, functions=["silu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.silu(x)
