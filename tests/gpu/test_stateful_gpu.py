"""A stateful reference on the GPU: its state, drawn by the CUDA generator in the driver, is
copied into the candidate (drawn on the CPU in the runner), and every call starts from it."""

import pytest

from tests.judge.test_stateful_reference import judge_stateful

pytestmark = pytest.mark.gpu

KERNEL = r"""
#include <cstdint>
#include <cuda_runtime.h>

__global__ void add_kernel(const float* x, const float* s, float* out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + s[i];
}

extern "C" void add(const float* x, const float* s, float* out, int64_t n, cudaStream_t stream) {
  if (n > 0) add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, s, out, n);
}
"""


def test_an_honest_stateful_candidate_is_accepted_on_the_gpu(tmp_path):
    verdict = judge_stateful(tmp_path, "cuda", "add.cu", KERNEL)
    assert verdict.correct and verdict.verdict == "accept", (verdict.error, verdict.violations)
    assert verdict.checks["deterministic"] is True
