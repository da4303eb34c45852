"""Linear layer, bias and ReLU with a new thread for every four rows of the output.

Each call starts a wave of std::threads (one per core), each computing a four-row tile and
ending after well under a millisecond of CPU time, then the next wave: no pool kept across calls.
Work on threads that end within one sampling period must still be seen as the solution's own.

Task: tasks/linear_relu.py
Devices: cpu
Expect: accept
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <algorithm>
#include <thread>
#include <vector>

static void tile(const float* x, const float* w, const float* b, float* out, int64_t r0,
                 int64_t r1, int64_t in, int64_t outs) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t o = 0; o < outs; ++o) {
      // eight partial sums the compiler can keep in one vector register
      float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t k = 0;
      for (; k + 8 <= in; k += 8)
        for (int j = 0; j < 8; ++j) lane[j] += x[r * in + k + j] * w[o * in + k + j];
      float acc = b[o];
      for (; k < in; ++k) acc += x[r * in + k] * w[o * in + k];
      for (int j = 0; j < 8; ++j) acc += lane[j];
      out[r * outs + o] = acc > 0.0f ? acc : 0.0f;
    }
  }
}

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && b.is_contiguous());
  const int64_t rows = x.size(0), in = x.size(1), outs = w.size(0);
  auto out = torch::empty({rows, outs}, x.options());
  const int64_t per = 4;
  const int64_t wave = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>(), *bp = b.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t start = 0; start < rows; start += per * wave) {
    std::vector<std::thread> threads;
    for (int64_t r = start; r < std::min(rows, start + per * wave); r += per)
      threads.emplace_back(tile, xp, wp, bp, op, r, std::min(rows, r + per), in, outs);
    for (auto& t : threads) t.join();
  }
  return out;
}
"""

ext = load_inline(
    name="frc_thread_per_tile_linear",
    cpp_sources=CPP_SOURCE,
    functions=["linear_relu"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x):
        return ext.linear_relu(x, self.linear.weight, self.linear.bias)
