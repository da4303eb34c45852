"""A kernel builder under another name, cached by block size, called from __init__.

`load_inline as compile_cpp` inside an `lru_cache`d `build(block)`, `super(self.__class__,
self)`, a docstring naming at::native::silu_kernel (what it replaces) and a `__main__` block
importing sys and time: each was refused once (a stranger's report).

Task: tasks/silu.py
Devices: cpu
Expect: accept
"""

import functools

import torch.nn as nn
from torch.utils.cpp_extension import load_inline as compile_cpp

# PyTorch computes silu with at::native::silu_kernel; this is a plain blocked loop.
SRC = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor silu(torch::Tensor x, int64_t block) {
  auto xc = x.contiguous();
  auto out = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = xc.numel();
  for (int64_t start = 0; start < n; start += block) {
    const int64_t end = start + block < n ? start + block : n;
    for (int64_t i = start; i < end; ++i) o[i] = in[i] / (1.0f + std::exp(-in[i]));
  }
  return out;
}
"""


@functools.lru_cache(maxsize=None)  # noqa: UP033 (as written elsewhere)
def build(block):
    return compile_cpp(name=f"frc_silu_block_{block}", cpp_sources=SRC, functions=["silu"])


class ModelNew(nn.Module):
    def __init__(self):
        super(self.__class__, self).__init__()
        self.block = 1024
        self.ext = build(self.block)

    def forward(self, x):
        return self.ext.silu(x, self.block)


if __name__ == "__main__":
    import sys
    import time

    import torch

    model = ModelNew()
    x = torch.randn(4096)
    start = time.perf_counter()
    model(x)
    print(f"{(time.perf_counter() - start) * 1e3:.3f} ms", file=sys.stderr)
