"""Correct solutions of built-in tasks, for benchmarks that play episodes: the demo's own, and
a row-wise dot product (`weighted_row_sum`: eager ~1.1 ms on an H200, outputs of 64 KiB where
the demo's are 1 GiB, so the judge's output transfers weigh little in its step times).

    scripted_solution("weighted_row_sum", "cuda") -> {"kernels/...": source, "model_new.py": ...}
"""

from __future__ import annotations

from cuda_gym.demo import CPU_KERNEL, CUDA_BINDING, CUDA_KERNEL, DEMO_TASK, MODEL_NEW

ROW_SUM_CUDA_KERNEL = r"""// out[r] = sum_c x[r,c] * w[r,c]
// A block per row, 16-byte loads, warp-shuffle reduction.
#include <cuda_runtime.h>
#include <cstdint>

constexpr int kThreads = 256;

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void weighted_row_sum_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                        float* __restrict__ out, int64_t cols, bool vec4) {
  const float* xr = x + (int64_t)blockIdx.x * cols;
  const float* wr = w + (int64_t)blockIdx.x * cols;
  float acc = 0.f;
  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* w4 = reinterpret_cast<const float4*>(wr);
    for (int64_t i = threadIdx.x; i < cols / 4; i += kThreads) {
      const float4 a = x4[i], b = w4[i];
      acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) acc += xr[i] * wr[i];
  }
  __shared__ float partial[kThreads / 32];
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = warp_sum(threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : 0.f);
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
  }
}

void launch_weighted_row_sum(const float* x, const float* w, float* out, int64_t rows,
                             int64_t cols, cudaStream_t stream) {
  if (rows == 0) return;
  // Rows start 16-byte aligned when the base pointers are and the row length is a multiple of 4.
  const bool vec4 = cols % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(w) % 16 == 0;
  weighted_row_sum_kernel<<<(unsigned)rows, kThreads, 0, stream>>>(x, w, out, cols, vec4);
}
"""

ROW_SUM_CUDA_BINDING = r"""// Thin torch binding for kernels/row_sum.cu.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/cuda/CUDAContext.h>

void launch_weighted_row_sum(const float* x, const float* w, float* out, int64_t rows,
                             int64_t cols, cudaStream_t stream);

torch::Tensor weighted_row_sum(torch::Tensor x, torch::Tensor w) {
  TORCH_CHECK(x.is_cuda() && w.is_cuda(), "inputs must be CUDA tensors");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32,
              "float32 only");
  TORCH_CHECK(x.dim() == 2 && x.sizes() == w.sizes(), "x and w must be matrices of one shape");
  TORCH_CHECK(x.size(0) < (int64_t(1) << 31), "too many rows for one grid");
  x = x.contiguous();
  w = w.contiguous();
  auto out = torch::empty({x.size(0)}, x.options());
  launch_weighted_row_sum(x.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(),
                          x.size(0), x.size(1), at::cuda::getCurrentCUDAStream());
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("weighted_row_sum", &weighted_row_sum, "sum(x * w, dim=1)");
}
"""

ROW_SUM_CPU_KERNEL = r"""// out[r] = sum_c x[r,c] * w[r,c]
// Rows in parallel (OpenMP), each summed in double.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

torch::Tensor weighted_row_sum(torch::Tensor x, torch::Tensor w) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32,
              "float32 only");
  TORCH_CHECK(x.dim() == 2 && x.sizes() == w.sizes(), "x and w must be matrices of one shape");
  x = x.contiguous();
  w = w.contiguous();
  auto out = torch::empty({x.size(0)}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t rows = x.size(0), cols = x.size(1);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int64_t c = 0; c < cols; ++c) acc += (double)xp[r * cols + c] * wp[r * cols + c];
    op[r] = (float)acc;
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("weighted_row_sum", &weighted_row_sum, "sum(x * w, dim=1)");
}
"""

ROW_SUM_MODEL_NEW = '''"""ModelNew: the row-wise dot product as one kernel from kernels_ext."""

import torch.nn as nn

import kernels_ext


class ModelNew(nn.Module):
    def forward(self, x, w):
        return kernels_ext.weighted_row_sum(x, w)
'''

ROW_SUM_TASK = "weighted_row_sum"
SOLVED_TASKS = (DEMO_TASK, ROW_SUM_TASK)


def scripted_solution(task_id: str, device: str) -> dict[str, str]:
    """A correct solution of `task_id` for `device` ("cuda" or "cpu"): path -> source."""
    if task_id == DEMO_TASK:
        if device == "cuda":
            kernels = {"kernels/gated.cu": CUDA_KERNEL, "kernels/binding.cpp": CUDA_BINDING}
        else:
            kernels = {"kernels/gated.cpp": CPU_KERNEL}
        return kernels | {"model_new.py": MODEL_NEW}
    if task_id == ROW_SUM_TASK:
        if device == "cuda":
            kernels = {
                "kernels/row_sum.cu": ROW_SUM_CUDA_KERNEL,
                "kernels/binding.cpp": ROW_SUM_CUDA_BINDING,
            }
        else:
            kernels = {"kernels/row_sum.cpp": ROW_SUM_CPU_KERNEL}
        return kernels | {"model_new.py": ROW_SUM_MODEL_NEW}
    raise KeyError(f"no scripted solution for task {task_id!r}; solved: {SOLVED_TASKS}")
