"""A CUDA recurrent layer whose time loop is Python, one launch of its own per time step.

forward walks 1024 time steps in Python and launches its step kernel once per step: a thousand
calls of its own a forward, each pybind11's dispatch and a launch (the solution's own host code
runs ~1-3 us a call), with the interpreter's loop around them.

Task: tasks/rnn_sequence.py
Devices: cuda
Timing: yes
Expect: accept
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// out_t = tanh(x_t W_ih^T + b_ih + h W_hh^T + b_hh): one thread per (batch entry, unit)
__global__ void rnn_step_kernel(const float* x, const float* h, const float* wi,
                                const float* wh, const float* bi, const float* bh,
                                float* out, int B, int I, int H) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * H) return;
  const int b = idx / H, j = idx % H;
  float acc = bi[j] + bh[j];
  for (int k = 0; k < I; ++k) acc += x[b * I + k] * wi[j * I + k];
  for (int k = 0; k < H; ++k) acc += h[b * H + k] * wh[j * H + k];
  out[idx] = tanhf(acc);
}

void rnn_step(torch::Tensor x_t, torch::Tensor h, torch::Tensor w_ih, torch::Tensor w_hh,
              torch::Tensor b_ih, torch::Tensor b_hh, torch::Tensor out_t) {
  const int B = x_t.size(0), I = x_t.size(1), H = w_hh.size(0);
  rnn_step_kernel<<<(B * H + 127) / 128, 128, 0, at::cuda::getCurrentCUDAStream()>>>(
      x_t.data_ptr<float>(), h.data_ptr<float>(), w_ih.data_ptr<float>(),
      w_hh.data_ptr<float>(), b_ih.data_ptr<float>(), b_hh.data_ptr<float>(),
      out_t.data_ptr<float>(), B, I, H);
}
"""
CPP_SOURCE = (
    "void rnn_step(torch::Tensor x_t, torch::Tensor h, torch::Tensor w_ih, torch::Tensor w_hh,"
    " torch::Tensor b_ih, torch::Tensor b_hh, torch::Tensor out_t);"
)

ext = load_inline(
    name="frc_cuda_rnn_time_loop",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["rnn_step"],
)


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.rnn = nn.RNN(input_size, hidden_size)

    def forward(self, x):
        x = x.contiguous()
        rnn = self.rnn
        shape = (x.shape[0], x.shape[1], rnn.hidden_size)
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
        h = torch.zeros(x.shape[1], rnn.hidden_size, dtype=x.dtype, device=x.device)
        for t in range(x.shape[0]):
            step = out[t]
            ext.rnn_step(
                x[t], h, rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0, step
            )
            h = step
        return out
