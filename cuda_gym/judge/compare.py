"""Compare candidate outputs with reference outputs under a precision mode (trusted side).

Modes:
- `strict`: float32 outputs are judged against a float64 reference, within the larger of two
  bounds (both normwise: one absolute bound per output):
  1. fp32 arithmetic's own: `u * units * M` (u = 2^-24; judge/contract.py): M is the largest
     magnitude of the float64 pass on |inputs| and |parameters| (the sum of |terms| for sums,
     dot products, convolutions and scans), capped at `units` times the output's magnitude;
     `units` = max(4 sqrt(n), n / 20) for the total accumulation length n, + 16 per
     transcendental op + 1 per other op,
     counted from the task's ops. This admits any summation order (serial, tree, split-K,
     Kahan, running scans) and fast-math transcendentals, whatever torch's own kernel does.
  2. STRICT_FACTOR x how far torch's own float32 result is from float64 (at least one ulp of the
     largest magnitude): the op's conditioning as torch's algorithm meets it.
  TF32/FP16/BF16 downgrades (unit roundoff 2^-11 and 2^-8, 8192x and 65536x fp32's) fail up to
  accumulation lengths of a few thousand; past about 10^4 a naive fp32 sum's own error reaches
  that of fp32 inputs rounded to TF32, and no bound separates the two.
  Other dtypes use the `kernelbench` tolerances.
- `kernelbench`: allclose with atol = rtol = 1e-4 for float32, 1e-2 for float16/bfloat16.
- `paper`: allclose with atol = rtol = 1e-2 (the published setting).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

MAX_DETAILS = 8
STRICT_FACTOR = 16.0
EPS32 = float(torch.finfo(torch.float32).eps)
U32 = EPS32 / 2  # fp32's unit roundoff, 2^-24
MODES = ("strict", "kernelbench", "paper")


def allclose_tolerance(mode: str, dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) of an allclose-style mode for one dtype."""
    if mode == "paper":
        return 1e-2, 1e-2
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2, 1e-2
    return 1e-4, 1e-4


@dataclass
class Comparison:
    """Result of comparing all trials.

    Attributes:
        correct: Every output of every trial matched.
        max_abs_error: Largest absolute difference seen (over comparable outputs).
        max_rel_error: Largest |diff| / (|reference| + atol) seen.
        details: Human-readable mismatch notes, at most a few.
    """

    correct: bool = True
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    details: list[str] = field(default_factory=list)

    def fail(self, note: str) -> None:
        """Record a mismatch."""
        self.correct = False
        if len(self.details) < MAX_DETAILS:
            self.details.append(note)


def check_outputs_match(
    expected: list[list],
    actual: list[list],
    mode: str = "kernelbench",
    expected64: list[list] | None = None,
    *,
    into: Comparison | None = None,
    first_trial: int = 0,
    scales: list[list] | None = None,
) -> Comparison:
    """Check `actual[trial][i]` against `expected[trial][i]` under `mode`.

    Args:
        expected: Reference outputs (the task's own precision), per trial.
        actual: Candidate outputs, per trial.
        mode: One of MODES.
        expected64: Float64 reference outputs, required for the strict check of float outputs;
            without them strict falls back to the kernelbench tolerances.
        into: Add to this Comparison (trials checked one at a time) instead of a new one.
        first_trial: Number of the first trial in the notes.
        scales: Per trial, per output, `(units, magnitude)` for strict mode's arithmetic bound
            (judge/contract.py) or None; without them only the reference-error bound applies.

    Outputs must be plain tensors with the reference's shape, dtype and device type; a
    non-finite value is accepted only where the reference has the same non-finite value.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {MODES}")
    result = Comparison() if into is None else into
    if len(actual) != len(expected):
        result.fail(f"expected {len(expected)} trials of outputs, got {len(actual)}")
        return result
    for trial, (exp_outs, act_outs) in enumerate(zip(expected, actual)):
        number = first_trial + trial
        if len(act_outs) != len(exp_outs):
            result.fail(f"trial {number}: expected {len(exp_outs)} output(s), got {len(act_outs)}")
            continue
        for i, (exp, act) in enumerate(zip(exp_outs, act_outs)):
            where = f"trial {number}, output {i}"
            if not isinstance(exp, torch.Tensor):
                if exp != act:
                    result.fail(f"{where}: expected {exp!r}, got {act!r}")
                continue
            problem = _structure_problem(exp, act)
            if problem:
                result.fail(f"{where}: {problem}")
                continue
            ref64 = expected64[trial][i] if expected64 is not None else None
            scale = _scale_at(scales, trial, i)
            _compare_values(result, where, exp, act, mode, ref64, scale)
    return result


def _scale_at(scales, trial: int, i: int):
    if scales is None or trial >= len(scales) or scales[trial] is None:
        return None
    row = scales[trial]
    return row[i] if i < len(row) else None


def _structure_problem(exp: torch.Tensor, act) -> str | None:
    if type(act) is not torch.Tensor:
        return f"expected a torch.Tensor, got {type(act).__name__}"
    if act.shape != exp.shape:
        return f"shape {tuple(act.shape)} != expected {tuple(exp.shape)}"
    if act.dtype != exp.dtype:
        return f"dtype {act.dtype} != expected {exp.dtype}"
    if act.device.type != exp.device.type:
        return f"device {act.device.type} != expected {exp.device.type}"
    return None


class _Rule:
    """A float output's tolerance: a fixed bound (strict) or atol + rtol * |reference|."""

    def __init__(
        self, exp: torch.Tensor, mode: str, ref64: torch.Tensor | None, scale=None
    ) -> None:
        self.strict = mode == "strict" and exp.dtype == torch.float32 and ref64 is not None
        if self.strict:
            # The larger of fp32 arithmetic's bound and STRICT_FACTOR x how far the fp32
            # reference is from fp64 (at least one fp32 ulp of the largest magnitude), over the
            # whole output.
            worst = magnitude = 0.0
            for e, r in _chunks(exp, ref64):
                if not e.numel():
                    continue
                ref = r.to(e.device, torch.float64)
                # Where the fp32 reference overflowed (inf beside a finite fp64 value) its
                # distance from fp64 is no measure of fp32 error (_compare_values lets such
                # elements match either reference).
                finite = torch.isfinite(ref) & torch.isfinite(e)
                worst = max(worst, float(torch.where(finite, (e.double() - ref).abs(), 0).max()))
                magnitude = max(magnitude, float(torch.where(finite, ref.abs(), 0).max()))
            measured = STRICT_FACTOR * max(worst, EPS32 * magnitude, 1e-30)
            arithmetic = arithmetic_bound(scale, magnitude)
            self.atol = max(measured, arithmetic)
            self.rtol = 0.0
            if arithmetic >= measured:
                self.label = (
                    f"strict bound {self.atol:.3g} (fp32 arithmetic: u x {scale[0]:.4g} units x "
                    f"magnitude {min(scale[1], scale[0] * magnitude):.4g})"
                )
            else:
                self.label = (
                    f"strict bound {self.atol:.3g} (fp32 reference error x{STRICT_FACTOR:g})"
                )
        else:
            self.atol, self.rtol = allclose_tolerance(mode, exp.dtype)
            self.label = f"atol={self.atol:g}, rtol={self.rtol:g}"

    def reference(self, exp: torch.Tensor, ref64: torch.Tensor | None) -> torch.Tensor:
        """The float64 values to compare with (one chunk of the output)."""
        return ref64.to(exp.device, torch.float64) if self.strict else exp.double()

    def tolerance(self, ref: torch.Tensor) -> torch.Tensor:
        """Per-element tolerance for a chunk of the reference."""
        if self.strict:
            return torch.full_like(ref, self.atol)
        return self.atol + self.rtol * ref.abs()


def arithmetic_bound(scale, magnitude: float) -> float:
    """`u * units * M` for scale = (units, M), with M capped at units x `magnitude`; 0 if None.

    The cap keeps a float64 pass on |inputs| that explodes (exp of a large |x| where x was
    negative) from loosening the bound past any accumulation's worth of the output's size.
    """
    if scale is None:
        return 0.0
    units, m = float(scale[0]), float(scale[1])
    if not (math.isfinite(units) and math.isfinite(m)) or units <= 0 or m <= 0:
        return 0.0
    return U32 * units * min(m, units * magnitude)


# Elements compared at once: each float64 temporary of a chunk is 128 MiB, so outputs of many
# GiB (KernelBench's larger problems) are compared in a bounded amount of extra memory.
CHUNK = 1 << 24


def _chunks(*tensors: torch.Tensor | None):
    """Aligned chunks of the flattened tensors (None stays None)."""
    flat = [t.reshape(-1) if t is not None else None for t in tensors]
    n = flat[0].numel()
    for start in range(0, max(n, 1), CHUNK):
        yield [f[start : start + CHUNK] if f is not None else None for f in flat]


def _compare_values(
    result: Comparison,
    where: str,
    exp: torch.Tensor,
    act: torch.Tensor,
    mode: str,
    ref64: torch.Tensor | None,
    scale=None,
) -> None:
    if not exp.is_floating_point():
        mismatched = sum(int((e != a).sum()) for e, a in _chunks(exp, act))
        if mismatched:
            result.fail(f"{where}: {mismatched} of {exp.numel()} values differ")
        return
    rule = _Rule(exp, mode, ref64, scale)
    bad_nonfinite = n_over = 0
    worst = None  # (diff - tol, flat index, got, expected) of the worst value outside
    offset = 0
    for e, a, r in _chunks(exp, act, ref64 if rule.strict else None):
        ref = rule.reference(e, r)
        act64 = a.double()
        finite = torch.isfinite(ref)
        act_finite = torch.isfinite(act64)
        same_nonfinite = (~finite) & ((ref == act64) | (torch.isnan(ref) & torch.isnan(act64)))
        bad_nonfinite += int(((~finite) & ~same_nonfinite).sum())
        if rule.strict:
            # Where the fp32 reference overflowed beside a finite fp64 value, the output may
            # match the fp32 reference's own non-finite value, or else fp64's within the bound.
            own = e.double()
            as_fp32 = (~torch.isfinite(own)) & ((own == act64) | (own.isnan() & act64.isnan()))
            finite = finite & ~as_fp32
        bad_nonfinite += int((finite & ~act_finite).sum())
        diff = torch.where(finite & act_finite, (act64 - ref).abs(), 0)
        if diff.numel():
            result.max_abs_error = max(result.max_abs_error, float(diff.max()))
            rel = diff / (ref.abs() + rule.atol)
            result.max_rel_error = max(result.max_rel_error, float(rel.max()))
            excess = diff - rule.tolerance(ref)
            n_over += int((excess > 0).sum())
            idx = int(torch.argmax(excess))
            if float(excess[idx]) > 0 and (worst is None or float(excess[idx]) > worst[0]):
                worst = (float(excess[idx]), offset + idx, a[idx].item(), ref[idx].item())
        offset += e.numel()
    if bad_nonfinite:
        result.fail(f"{where}: {bad_nonfinite} non-finite values where the reference differs")
        return
    if n_over:
        _, idx, got, expected = worst
        result.fail(
            f"{where}: {n_over} of {exp.numel()} values outside {rule.label}; worst at flat "
            f"index {idx}: got {got:.8g}, expected {expected:.8g}"
        )


def runs_agree(
    first: list,
    second: list,
    mode: str,
    expected: list,
    expected64: list | None = None,
    scales: list | None = None,
) -> bool:
    """Whether two runs of the candidate on the same input differ by no more than the tolerance.

    The tolerance is the one the outputs are judged with (derived from the reference outputs
    `expected` / `expected64` of that input); non-finite values must match exactly.
    """
    if len(first) != len(second):
        return False
    for i, (a, b, exp) in enumerate(zip(first, second, expected)):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            if a != b:
                return False
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not a.is_floating_point():
            if not torch.equal(a, b):
                return False
            continue
        ref64 = expected64[i] if expected64 is not None else None
        rule = _Rule(exp, mode, ref64, scales[i] if scales and i < len(scales) else None)
        for ca, cb, e, r in _chunks(a, b, exp, ref64 if rule.strict else None):
            a64, b64 = ca.double(), cb.double()
            finite = torch.isfinite(a64) & torch.isfinite(b64)
            same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
            if not bool((finite | same).all()):
                return False
            diff = torch.where(finite, (a64 - b64).abs(), 0)
            tol = rule.tolerance(rule.reference(e, r)).to(diff.device)
            if bool((diff > tol).any()):
                return False
    return True
