"""Input sets for correctness trials: the task's own inputs, re-drawn from several distributions.

Both judge processes call `make_inputs` with the same seed and distribution and get bitwise the
same tensors (created on the device, from the device RNG).
"""

from __future__ import annotations

import torch

# Trial k uses DISTRIBUTIONS[k % len]. Transforms keep each tensor's sign and support.
DISTRIBUTIONS = ("as_is", "uniform", "heavy_tailed", "wide_range", "as_is")


def _transform(x: torch.Tensor, distribution: str, gen: torch.Generator) -> torch.Tensor:
    if not x.is_floating_point() or x.numel() < 2 or distribution == "as_is":
        return x
    if distribution == "uniform":
        lo, hi = x.min(), x.max()
        u = torch.rand(x.shape, generator=gen, device=x.device, dtype=x.dtype)
        return lo + u * (hi - lo)
    if distribution == "heavy_tailed":
        # Log-normal multipliers: same signs, rare values far out in the tails.
        z = torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)
        return x * torch.exp(0.75 * z)
    if distribution == "wide_range":
        # Magnitudes spread over six decades.
        u = torch.rand(x.shape, generator=gen, device=x.device, dtype=x.dtype)
        return x * torch.pow(10.0, 6.0 * u - 3.0)
    raise ValueError(f"unknown distribution {distribution!r}")


def make_inputs(task, seed: int, device: str, distribution: str = "as_is") -> list:
    """Call the task's `get_inputs()` under `seed` on `device`, then apply `distribution`.

    Args:
        task: The imported task module.
        seed: Trial seed.
        device: "cuda" or "cpu"; tensors are created there directly.
        distribution: One of DISTRIBUTIONS.
    """
    torch.manual_seed(seed)
    with torch.device(device):
        inputs = task.get_inputs()
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    gen = torch.Generator(device=device)
    gen.manual_seed(seed ^ 0x5EED)
    return [_transform(x, distribution, gen) if isinstance(x, torch.Tensor) else x for x in inputs]
