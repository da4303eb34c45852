"""Checks the candidate's worker makes around each call: plain outputs, no aliasing, inputs intact.

Also `poison_allocator`, which fills memory the CUDA caching allocator hands out next with NaN,
so a kernel that leaves part of its output unwritten fails instead of reading stale results.
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


def _storage_span(t) -> tuple[int, int]:
    start = t.untyped_storage().data_ptr()
    return start, start + t.untyped_storage().nbytes()


def is_plain_scalar(value) -> bool:
    """None or a plain bool/int/float: the non-tensor outputs the trusted side can load."""
    return value is None or type(value) in (bool, int, float)


def output_violations(out: list, args: list, originals: list) -> list[str]:
    """Plain tensors only, no aliasing of inputs, inputs left unmodified."""
    found = []
    arg_tensors = [a for a in args if isinstance(a, torch.Tensor)]
    for o in out:
        if not isinstance(o, torch.Tensor) and not is_plain_scalar(o):
            found.append(f"output_type: output is a {type(o).__name__}, not a plain Tensor")
            continue
        if isinstance(o, torch.Tensor):
            if type(o) is not torch.Tensor:
                found.append(f"output_type: output is a {type(o).__name__}, not a plain Tensor")
                continue
            o_lo, o_hi = _storage_span(o)
            for a in arg_tensors:
                a_lo, a_hi = _storage_span(a)
                if o_lo < a_hi and a_lo < o_hi and o.numel() and a.numel():
                    found.append("output_alias: an output shares memory with an input")
    for arg, orig in zip(args, originals):
        if isinstance(arg, torch.Tensor) and not bitwise_equal(arg, orig):
            found.append("input_mutated: ModelNew.forward modified one of its inputs")
    return found


def bitwise_equal(a, b) -> bool:
    """True when two tensors hold the same bits (NaN payloads included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}.get(a.element_size())
        if width is not None:
            return torch.equal(a.contiguous().view(width), b.contiguous().view(width))
    return torch.equal(a, b)
