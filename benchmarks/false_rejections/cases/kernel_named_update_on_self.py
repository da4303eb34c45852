"""The extension kept on self, its kernel named `update`, called in forward.

`self.ops.update(x, scale)` calls the author's kernel: two arguments, which no container's
`update` takes, so nothing is stored on the module (the store rule once matched the name).

Task: tasks/silu.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <cmath>

// "update": the cell's update activation, x * sigmoid(scale * x)
torch::Tensor update(torch::Tensor x, double scale) {
  auto xc = x.contiguous();
  auto out = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const float s = static_cast<float>(scale);
  for (int64_t i = 0; i < xc.numel(); ++i) o[i] = in[i] / (1.0f + std::exp(-s * in[i]));
  return out;
}
"""

_ops = load_inline(name="frc_update_named_kernel", cpp_sources=SRC, functions=["update"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ops = _ops

    def forward(self, x):
        return self.ops.update(x, 1.0)
