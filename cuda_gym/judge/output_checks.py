"""Checks on tensor bits: `bitwise_equal`, `Fingerprint` and `poison_allocator`.

`Fingerprint` is a digest of an output's bits taken when forward returns and again later;
`poison_allocator` fills memory the CUDA caching allocator hands out next with NaN, so a kernel
that leaves part of its output unwritten fails instead of reading stale results.
"""

from __future__ import annotations

import secrets

import torch

# Elements digested at once (each chunk's int64 temporaries are 128 MiB).
_CHUNK = 1 << 24
_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class Fingerprint:
    """64-bit digests of tensors' bits, on their own device, for "did this change later?".

    The digest is sum(bits_i * w_i) modulo 2^64 with odd weights w drawn from a seed chosen at
    random per instance (never in the candidate's reach): a change of one element always shows,
    and a change of several escapes with probability about 2^-63. Integer sums are exact in any
    order, so two digests of unchanged bits are equal. It needs one chunk of temporaries, not a
    copy of the tensor.
    """

    def __init__(self) -> None:
        self.seed = secrets.randbits(62)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        """The digest of `t` (an int64 scalar tensor on t's device)."""
        flat = t.detach().reshape(-1)
        width = _INT_OF_WIDTH.get(flat.element_size())
        bits = flat.view(width) if width is not None and flat.dtype != torch.bool else None
        if bits is None:
            bits = flat.view(torch.uint8)
        gen = torch.Generator(device=flat.device)
        gen.manual_seed(self.seed)
        total = torch.zeros((), dtype=torch.int64, device=flat.device)
        for part in bits.split(_CHUNK):
            weights = torch.randint(
                0, 1 << 62, part.shape, generator=gen, device=part.device, dtype=torch.int64
            )
            # Odd weights: a change of a single element always changes the digest.
            total += (part.to(torch.int64) * weights.bitwise_or_(1)).sum()
        return total


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
