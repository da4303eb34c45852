"""The extension built in ModelNew.__init__, not at import.

`self.ext = load_inline(...)` in `__init__`, a common KernelBench form: the build stage only
imports model_new.py, so the runner compiles it at load (outside the device gate, flagged
`extensions_compiled_at_load`); it was once refused as a compile nobody asked for.

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
  for (int64_t i = 0; i < xc.numel(); ++i) o[i] = in[i] / (1.0f + std::exp(-in[i]));
  return out;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline(name="frc_silu_in_init", cpp_sources=SRC, functions=["silu"])

    def forward(self, x):
        return self.ext.silu(x)
