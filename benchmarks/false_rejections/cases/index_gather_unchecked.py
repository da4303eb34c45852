"""Row gather that trusts its index range.

The kernel copies table rows by index without a bounds check: the task's indices come from
torch.randint(0, rows), and an embedding kernel in the wild relies on that.

Task: tasks/index_gather_rows.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor gather_rows(torch::Tensor table, torch::Tensor index, double scale) {
  TORCH_CHECK(table.is_contiguous() && index.scalar_type() == torch::kInt64);
  const int64_t dim = table.size(1), n = index.numel();
  auto out = torch::empty({n, dim}, table.options());
  const float* t = table.data_ptr<float>();
  const int64_t* idx = index.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  const float s = static_cast<float>(scale);
#pragma omp parallel for
  for (int64_t r = 0; r < n; ++r) {
    const float* src = t + idx[r] * dim;
    for (int64_t d = 0; d < dim; ++d) o[r * dim + d] = src[d] * s;
  }
  return out;
}
"""

ext = load_inline(
    name="frc_gather_rows",
    cpp_sources=CPP_SOURCE,
    functions=["gather_rows"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, table, index):
        return ext.gather_rows(table, index, self.scale)
