"""Input sets for correctness trials: the task's own inputs, re-drawn from several distributions.

Every trial starts from a fresh draw of the task's own `get_inputs()` under a secret seed; those
inputs are always valid. A trial's distribution may then transform some floating-point tensors:

- `uniform`: each nonzero value redrawn uniformly in [min, max] of the draw (zeros stay).
- `heavy_tailed`: each value times a random power of two, most near 1, rare ones far off.
- `wide_range`: each value times 10^-k (1 + 9 f) / 10, magnitudes spread over six decades.

Multipliers are positive, so signs and zeros stay. In a tensor's default domain ("observed")
they are at most 1, so every value stays within the range of the task's own draw; a task that
declares a tensor's domain "real" (judge/contract.py) gets multipliers above 1 as well (values up
to 100x the draw's). Which tensor a transform may touch is decided once per task by the probe
(judge/contract.py): only where the result keeps every invariant the task's own draws show.
A trial's distribution is written `name` (every floating-point tensor) or `name@MASK`, MASK one
character per input, `1` transformed, `r` transformed in the real domain, `0` left as drawn.

Both judge processes call `make_inputs` with the same seed and distribution and get bitwise the
same tensors (created on the device, from the device RNG). The transforms therefore use only
correctly rounded arithmetic (+, -, *, rounding, table look-up), never exp or pow: a CPU process's
exp can differ from another's in the last bits (seen on CI: 5e-5 relative in one process's main
thread), and the reference would then judge the candidate on other inputs than its own.
"""

from __future__ import annotations

import hashlib

import torch

# Trial k uses DISTRIBUTIONS[k % len].
DISTRIBUTIONS = ("as_is", "uniform", "heavy_tailed", "wide_range", "as_is")
# Mask characters: left as drawn, transformed within the draw's range, transformed (real domain).
KEEP, OBSERVED, REAL = "0", "1", "r"


# Elements transformed at a time. Done whole, a transform's temporaries (float32 draws, the
# table's int64 index) come to about seven times the input: 56 GiB for one of KernelBench's 8 GiB
# level-1 inputs. In pieces they stay near 1.5 GiB. Inputs up to one piece are transformed
# exactly as before.
CHUNK = 1 << 26


def _transform(
    x: torch.Tensor, distribution: str, gen: torch.Generator, domain: str = OBSERVED
) -> torch.Tensor:
    if not x.is_floating_point() or x.numel() < 2 or distribution == "as_is" or domain == KEEP:
        return x
    real = domain == REAL
    if distribution == "uniform":
        lo, hi = x.min(), x.max()

        def piece(part: torch.Tensor) -> torch.Tensor:
            u = torch.rand(part.shape, generator=gen, device=part.device, dtype=part.dtype)
            # min() keeps lo + u (hi - lo) <= hi where the product rounds up.
            return torch.where(part == 0, part, torch.minimum(lo + u * (hi - lo), hi))

    elif distribution == "heavy_tailed":
        # Nearly log-normal multipliers, 2^t with t ~ N(0, (0.75/ln 2)^2): same signs, rare values
        # far out in the tails. 2^t = 2^k * 2^f with k = round(t), and 2^f ~ 1 + f ln 2. Within
        # the observed domain t is -|t|: most values shrink a little, rare ones by 2^-8.
        def piece(part: torch.Tensor) -> torch.Tensor:
            t = torch.randn(part.shape, generator=gen, device=part.device, dtype=torch.float32)
            t = (t * (0.75 / LN2)).clamp_(-POW2_SPAN, POW2_SPAN)
            if not real:
                t = -t.abs()
            k = t.round()
            scale = _power_table(2.0, POW2_SPAN, part, k)
            m = scale * (1.0 + (t - k) * LN2).to(part.dtype)
            if not real:  # 2^f <= 1 for f <= 0, but 1 + f ln 2 can pass 1 where k rounded down
                m = m.clamp_(max=1.0)
            return part * m

    elif distribution == "wide_range":
        # Magnitudes spread over six decades: 10^k * (1 + 9 f), k = -3..2 (real domain) or
        # k = -6..-1 (observed domain: every multiplier at most 1), f uniform in [0, 1).
        top = 2 if real else -1

        def piece(part: torch.Tensor) -> torch.Tensor:
            e = torch.rand(part.shape, generator=gen, device=part.device, dtype=torch.float32)
            e = e * 6.0 + (top - 5.0)
            k = e.floor().clamp_(top - 5, top)
            m = _power_table(10.0, 6, part, k) * (1.0 + (e - k) * 9.0).to(part.dtype)
            if not real:  # a multiplier of at most 1 keeps |value| within the draw's
                m = m.clamp_(max=1.0)
            return part * m

    else:
        raise ValueError(f"unknown distribution {distribution!r}")
    if x.numel() <= CHUNK or not x.is_contiguous():
        return piece(x)
    out = torch.empty_like(x)
    flat, flat_out = x.view(-1), out.view(-1)
    for start in range(0, flat.numel(), CHUNK):
        flat_out[start : start + CHUNK] = piece(flat[start : start + CHUNK])
    return out


LN2 = 0.6931471805599453
POW2_SPAN = 8  # multipliers from 2^-8 to 2^8: past 10 standard deviations


def _power_table(base: float, span: int, x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """base**k for integer-valued k in [-span, span], looked up (exact to x's dtype)."""
    table = torch.tensor([base**i for i in range(-span, span + 1)], dtype=x.dtype, device=x.device)
    return table[(k + span).long()]


def parse_distribution(spec: str) -> tuple[str, str | None]:
    """`name` or `name@MASK` -> (name, MASK or None); refuses unknown names and mask characters."""
    name, _, mask = spec.partition("@")
    if name not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {name!r}")
    if mask and set(mask) - {KEEP, OBSERVED, REAL}:
        raise ValueError(f"distribution mask {mask!r} may hold only 0, 1 and r")
    return name, (mask if "@" in spec else None)


def draw_inputs(task, seed: int, device: str) -> list:
    """The task's own `get_inputs()` under `seed`, created on `device`."""
    torch.manual_seed(seed)
    with torch.device(device):
        inputs = task.get_inputs()
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def transform_inputs(inputs: list, seed: int, distribution: str) -> list:
    """Apply `distribution` (a name, or `name@MASK`) to a draw made under `seed`."""
    name, mask = parse_distribution(distribution)
    device = next((x.device for x in inputs if isinstance(x, torch.Tensor)), torch.device("cpu"))
    gen = torch.Generator(device=device)
    gen.manual_seed(seed ^ 0x5EED)
    out = []
    for i, x in enumerate(inputs):
        domain = OBSERVED if mask is None else (mask[i] if i < len(mask) else KEEP)
        out.append(_transform(x, name, gen, domain) if isinstance(x, torch.Tensor) else x)
    return out


def make_inputs(task, seed: int, device: str, distribution: str = "as_is") -> list:
    """Call the task's `get_inputs()` under `seed` on `device`, then apply `distribution`.

    Args:
        task: The imported task module.
        seed: Trial seed.
        device: "cuda" or "cpu"; tensors are created there directly.
        distribution: One of DISTRIBUTIONS, or `name@MASK` (which inputs it may transform).
    """
    parse_distribution(distribution)  # refuse a bad name before drawing anything
    return transform_inputs(draw_inputs(task, seed, device), seed, distribution)


def forward_seed(seed: int) -> int:
    """The seed torch's generators get before every forward pass on trial `seed`'s inputs.

    Both judge processes seed the forward pass this way, the candidate's in the correctness
    trials, the repeat and every timed call, so a stochastic model (training-mode dropout, as in
    KernelBench's level-2 66_Matmul_Dropout_Softmax) draws the same numbers on the same inputs in
    each. One-way: a candidate that reads `torch.initial_seed()` in forward learns nothing of the
    trial seed, which draws the inputs.
    """
    digest = hashlib.sha256(b"cuda_gym.forward:%d" % seed).digest()
    return int.from_bytes(digest[:8], "little") >> 2  # 62 bits, as the trial seeds


def seed_forward(fseed: int) -> None:
    """Seed torch's CPU and CUDA generators with `fseed` (from `forward_seed`)."""
    torch.manual_seed(fseed)
