"""Row sums written 1-D by the kernel, made a column with `out.unsqueeze_(1)`.

An in-place view changes only the tensor's metadata, as `unsqueeze` does; the ban once allowed
the view and refused its in-place form (a stranger's report).

Task: tasks/row_sum_keepdim.py
Devices: cpu
Expect: accept
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>

void row_sum_out(torch::Tensor x, torch::Tensor out) {
  TORCH_CHECK(x.is_contiguous() && out.is_contiguous());
  const int64_t rows = x.size(0), cols = x.size(1);
  const float* p = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int64_t c = 0; c < cols; ++c) acc += p[r * cols + c];
    o[r] = static_cast<float>(acc);
  }
}
"""

ext = load_inline(name="frc_row_sum_unsqueeze", cpp_sources=SRC, functions=["row_sum_out"])


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty(x.size(0), dtype=x.dtype, device=x.device)
        ext.row_sum_out(x, out)
        out.unsqueeze_(1)
        return out
