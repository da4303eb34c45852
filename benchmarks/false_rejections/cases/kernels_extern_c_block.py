"""A kernel-only workspace whose C linkage comes from an `extern "C" { }` block.

The header declares the host function inside `#ifdef __cplusplus extern "C" {` and the source
defines it in another block: standard C/C++, which the binder once read only in the one-line
`extern "C" void f(...) {` form (a stranger's report).

Task: tasks/silu.py
Devices: cpu
Kernels: shared
Expect: accept
"""

import kernels_ext
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        kernels_ext.silu_f32(x, out, x.numel())
        return out
