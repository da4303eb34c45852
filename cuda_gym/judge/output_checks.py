"""Checks on tensor bits: `bitwise_equal` and `poison_allocator`.

`poison_allocator` fills memory the CUDA caching allocator hands out next with NaN, so a kernel
that leaves part of its output unwritten fails instead of reading stale results.
"""

from __future__ import annotations

import torch


def poison_allocator(input_sets: list, device: str) -> None:
    """Fill memory the caching allocator will hand out next with NaN (CUDA only)."""
    if device != "cuda":
        return
    nbytes = sum(x.numel() * x.element_size() for x in input_sets[0] if isinstance(x, torch.Tensor))
    poison = torch.empty(max(nbytes, 1 << 20) // 2, dtype=torch.float32, device=device)
    poison.fill_(float("nan"))
    del poison


def bitwise_equal(a, b) -> bool:
    """True when two tensors hold the same bits (NaN payloads included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}.get(a.element_size())
        if width is not None:
            return torch.equal(a.contiguous().view(width), b.contiguous().view(width))
    return torch.equal(a, b)
