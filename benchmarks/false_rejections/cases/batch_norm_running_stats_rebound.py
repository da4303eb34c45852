"""BatchNorm in training mode that rebinds its running statistics in forward.

One C++ function normalises with the batch statistics and returns the updated running mean and
variance as new tensors; forward rebinds its registered buffers to them, as nn.BatchNorm2d
updates its own in place.

Task: tasks/batch_norm_train.py
Devices: cpu
Expect: accept
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>
#include <vector>

std::vector<torch::Tensor> batch_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b,
                                      torch::Tensor running_mean, torch::Tensor running_var,
                                      double eps, double momentum) {
  x = x.contiguous();
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2) * x.size(3);
  auto out = torch::empty_like(x);
  auto mean = running_mean.clone();
  auto var = running_var.clone();
  const float* px = x.data_ptr<float>();
  float* po = out.data_ptr<float>();
  float* pm = mean.data_ptr<float>();
  float* pv = var.data_ptr<float>();
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0.0, sq = 0.0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) sum += px[(n * C + c) * S + i];
    const double m = sum / (N * S);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) {
        const double d = px[(n * C + c) * S + i] - m;
        sq += d * d;
      }
    const double v = sq / (N * S);
    const double scale = w.data_ptr<float>()[c] / std::sqrt(v + eps);
    const double shift = b.data_ptr<float>()[c];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t k = (n * C + c) * S + i;
        po[k] = static_cast<float>((px[k] - m) * scale + shift);
      }
    pm[c] = static_cast<float>((1.0 - momentum) * pm[c] + momentum * m);
    pv[c] = static_cast<float>((1.0 - momentum) * pv[c] + momentum * v * N * S / (N * S - 1));
  }
  return {out, mean, var};
}
"""

ext = load_inline(
    name="false_rejection_batch_norm", cpp_sources=CPP_SOURCE, functions=["batch_norm"]
)


class ModelNew(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.eps, self.momentum = 1e-5, 0.1

    def forward(self, x):
        out, self.running_mean, self.running_var = ext.batch_norm(
            x, self.weight, self.bias, self.running_mean, self.running_var, self.eps, self.momentum
        )
        return out
