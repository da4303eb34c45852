"""Triton row softmax, autotuned over block sizes, an online max in one pass.

The Triton style of public answers: @triton.autotune over configs keyed on the row length, a
lambda grid, tl.load with masks; Triton compiles and benchmarks its configs at the first call,
inside the judged process. Timed: its launcher runs at every launch of the warm-up's calls.

Task: tasks/row_softmax.py
Devices: cuda
Timing: yes
Expect: accept
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=8),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=8),
    ],
    key=["n_cols"],
)
@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(axis=0)
    row_start_ptr = in_ptr + row_idx * in_row_stride
    col_offsets = tl.arange(0, BLOCK_SIZE)
    # online pass over the row in blocks
    m = tl.full([BLOCK_SIZE], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + col_offsets
        x = tl.load(row_start_ptr + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    row_max = tl.max(m, axis=0)
    denom = tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + col_offsets
        mask = cols < n_cols
        x = tl.load(row_start_ptr + cols, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) / denom
        tl.store(out_ptr + row_idx * out_row_stride + cols, y, mask=mask)


def triton_softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    grid = lambda meta: (n_rows,)
    softmax_kernel[grid](y, x, x.stride(0), y.stride(0), n_cols)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_softmax(x)
