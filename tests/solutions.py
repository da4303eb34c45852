"""Candidate solutions used by the tests: correct, wrong, crashing and hanging kernels."""

from __future__ import annotations

from pathlib import Path

from cuda_gym.demo import CPU_KERNEL, CUDA_BINDING, CUDA_KERNEL, MODEL_NEW

TASK_ID = "sigmoid_gated_multiply"

# One C++ extension holding every misbehaving kernel, so the tests build it once.
BAD_CPU_KERNELS = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <cmath>

// Forgets the bias: wrong by sigmoid(gate) vs sigmoid(gate + bias).
torch::Tensor wrong(torch::Tensor x, torch::Tensor gate, torch::Tensor bias) {
  auto out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>(); const float* gp = gate.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) op[i] = xp[i] / (1.0f + std::exp(-gp[i]));
  return out;
}

// Writes through a null pointer: the process dies with SIGSEGV.
torch::Tensor crash(torch::Tensor x, torch::Tensor gate, torch::Tensor bias) {
  volatile float* p = nullptr;
  p[12345] = 1.0f;
  return x;
}

// Never returns.
torch::Tensor spin(torch::Tensor x, torch::Tensor gate, torch::Tensor bias) {
  volatile int64_t i = 0;
  while (true) { i = i + 1; }
  return x;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("wrong", &wrong);
  m.def("crash", &crash);
  m.def("spin", &spin);
}
"""

COMPILE_ERROR_KERNEL = r"""
#include <torch/types.h>
torch::Tensor broken(torch::Tensor x) {
  return x + undeclared_variable;
}
"""


def model_new_calling(function: str) -> str:
    """A model_new.py whose forward calls kernels_ext.<function>."""
    return MODEL_NEW.replace("kernels_ext.gated_multiply", f"kernels_ext.{function}")


def write_solution(root: Path, device: str, kind: str) -> Path:
    """Write a solution of the given kind ("correct", "wrong", "crash", "spin", "compile_error")."""
    kernels = root / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    if kind == "correct":
        if device == "cuda":
            (kernels / "gated.cu").write_text(CUDA_KERNEL)
            (kernels / "binding.cpp").write_text(CUDA_BINDING)
        else:
            (kernels / "gated.cpp").write_text(CPU_KERNEL)
        (root / "model_new.py").write_text(MODEL_NEW)
    elif kind == "compile_error":
        (kernels / "broken.cpp").write_text(COMPILE_ERROR_KERNEL)
        (root / "model_new.py").write_text(MODEL_NEW)
    else:
        (kernels / "bad.cpp").write_text(BAD_CPU_KERNELS)
        (root / "model_new.py").write_text(model_new_calling(kind))
    return root


# CUDA counterparts of the misbehaving kernels, for the GPU tests.
BAD_CUDA_KERNELS = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void wrong_kernel(const float* x, const float* g, float* o, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = x[i] / (1.0f + expf(-g[i]));  // forgets the bias
}

__global__ void crash_kernel(float* o) {
  float* p = reinterpret_cast<float*>(0x10);
  *p = o[0];  // illegal address
}

__global__ void spin_kernel(volatile int* flag) {
  while (*flag == 0) { }
}

torch::Tensor wrong(torch::Tensor x, torch::Tensor gate, torch::Tensor bias) {
  auto out = torch::empty_like(x);
  int64_t n = x.numel();
  wrong_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), gate.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}

torch::Tensor crash(torch::Tensor x, torch::Tensor gate, torch::Tensor bias) {
  auto out = torch::empty_like(x);
  crash_kernel<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(out.data_ptr<float>());
  return out;
}

torch::Tensor spin(torch::Tensor x, torch::Tensor gate, torch::Tensor bias) {
  auto flag = torch::zeros({1}, x.options().dtype(torch::kInt32));
  spin_kernel<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(flag.data_ptr<int>());
  return x;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("wrong", &wrong);
  m.def("crash", &crash);
  m.def("spin", &spin);
}
"""


def write_cuda_bad_solution(root: Path, kind: str) -> Path:
    """A CUDA solution calling the misbehaving kernel `kind` ("wrong", "crash", "spin")."""
    kernels = root / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    (kernels / "bad.cu").write_text(BAD_CUDA_KERNELS)
    (root / "model_new.py").write_text(model_new_calling(kind))
    return root


# A kernel-only workspace (no torch headers: judge/plain_build.py) for the gated multiply.
KERNEL_ONLY_CPU = """#include <cmath>
#include <cstdint>
extern "C" void gated_multiply(const float* x, const float* g, const float* b, float* out,
                               int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = x[r * cols + c] / (1.0f + std::exp(-(g[r * cols + c] + b[c])));
}
"""
KERNEL_ONLY_CUDA = r"""
#include <cstdint>
#include <cuda_runtime.h>

__global__ void gated_kernel(const float* __restrict__ x, const float* __restrict__ g,
                             const float* __restrict__ b, float* __restrict__ out,
                             int64_t n, int64_t cols) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] / (1.0f + expf(-(g[i] + b[i % cols])));
}

extern "C" void gated_multiply(const float* x, const float* g, const float* b, float* out,
                               int64_t rows, int64_t cols, cudaStream_t stream) {
  int64_t n = rows * cols;
  if (n == 0) return;
  gated_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, g, b, out, n, cols);
}
"""
KERNEL_ONLY_MODEL_NEW = """import torch
import torch.nn as nn

import kernels_ext


class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.gate_bias = nn.Parameter(torch.empty(hidden_size))

    def forward(self, x, gate):
        x, gate = x.contiguous(), gate.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        kernels_ext.gated_multiply(x, gate, self.gate_bias, out, x.numel() // cols, cols)
        return out
"""


def write_kernel_only_solution(root: Path, device: str) -> Path:
    """The gated multiply as a kernel-only workspace for `device`."""
    kernels = root / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    if device == "cuda":
        (kernels / "gated.cu").write_text(KERNEL_ONLY_CUDA)
    else:
        (kernels / "gated.cpp").write_text(KERNEL_ONLY_CPU)
    (root / "model_new.py").write_text(KERNEL_ONLY_MODEL_NEW)
    return root
