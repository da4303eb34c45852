"""Compare candidate outputs with reference outputs under a precision mode (trusted side).

Modes:
- `strict`: float32 outputs are judged against a float64 reference. The tolerance is derived
  from how far the float32 reference itself is from float64 (times STRICT_FACTOR), so honest
  float32 reorderings pass while TF32/FP16/BF16 downgrades (errors ~1000x larger) fail.
  Other dtypes use the `kernelbench` tolerances.
- `kernelbench`: allclose with atol = rtol = 1e-4 for float32, 1e-2 for float16/bfloat16.
- `paper`: allclose with atol = rtol = 1e-2 (the published setting).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

MAX_DETAILS = 8
STRICT_FACTOR = 16.0
EPS32 = float(torch.finfo(torch.float32).eps)
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
) -> Comparison:
    """Check `actual[trial][i]` against `expected[trial][i]` under `mode`.

    Args:
        expected: Reference outputs (the task's own precision), per trial.
        actual: Candidate outputs, per trial.
        mode: One of MODES.
        expected64: Float64 reference outputs, required for the strict check of float outputs;
            without them strict falls back to the kernelbench tolerances.

    Outputs must be plain tensors with the reference's shape, dtype and device type; a
    non-finite value is accepted only where the reference has the same non-finite value.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {MODES}")
    result = Comparison()
    if len(actual) != len(expected):
        result.fail(f"expected {len(expected)} trials of outputs, got {len(actual)}")
        return result
    for trial, (exp_outs, act_outs) in enumerate(zip(expected, actual)):
        if len(act_outs) != len(exp_outs):
            result.fail(f"trial {trial}: expected {len(exp_outs)} output(s), got {len(act_outs)}")
            continue
        for i, (exp, act) in enumerate(zip(exp_outs, act_outs)):
            where = f"trial {trial}, output {i}"
            if not isinstance(exp, torch.Tensor):
                if exp != act:
                    result.fail(f"{where}: expected {exp!r}, got {act!r}")
                continue
            problem = _structure_problem(exp, act)
            if problem:
                result.fail(f"{where}: {problem}")
                continue
            ref64 = expected64[trial][i] if expected64 is not None else None
            _compare_values(result, where, exp, act, mode, ref64)
    return result


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


def _tolerance(
    exp: torch.Tensor, mode: str, ref64: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, float, str]:
    """(reference to compare with, per-element tolerance, atol used for relative errors, label)."""
    strict = mode == "strict" and exp.dtype == torch.float32 and ref64 is not None
    ref = ref64.to(exp.device, torch.float64) if strict else exp.double()
    finite = torch.isfinite(ref)
    if strict:
        e32 = torch.where(finite, (exp.double() - ref).abs(), torch.zeros_like(ref))
        magnitude = torch.where(finite, ref.abs(), torch.zeros_like(ref))
        floor = EPS32 * float(magnitude.max()) if magnitude.numel() else 0.0
        bound = STRICT_FACTOR * max(float(e32.max()) if e32.numel() else 0.0, floor, 1e-30)
        label = f"strict bound {bound:.3g} (fp32 reference error x{STRICT_FACTOR:g})"
        return ref, torch.full_like(ref, bound), bound, label
    atol, rtol = allclose_tolerance(mode, exp.dtype)
    return ref, atol + rtol * ref.abs(), atol, f"atol={atol:g}, rtol={rtol:g}"


def _compare_values(
    result: Comparison,
    where: str,
    exp: torch.Tensor,
    act: torch.Tensor,
    mode: str,
    ref64: torch.Tensor | None,
) -> None:
    if not exp.is_floating_point():
        mismatched = int((exp != act).sum())
        if mismatched:
            result.fail(f"{where}: {mismatched} of {exp.numel()} values differ")
        return
    ref, tol, atol, label = _tolerance(exp, mode, ref64)
    act64 = act.double()
    finite = torch.isfinite(ref)
    same_nonfinite = (~finite) & ((ref == act64) | (torch.isnan(ref) & torch.isnan(act64)))
    bad_nonfinite = int(((~finite) & ~same_nonfinite).sum()) + int(
        (finite & ~torch.isfinite(act64)).sum()
    )
    both = finite & torch.isfinite(act64)
    diff = torch.where(both, (act64 - ref).abs(), torch.zeros_like(ref))
    if diff.numel():
        result.max_abs_error = max(result.max_abs_error, float(diff.max()))
        rel = diff / (ref.abs() + atol)
        result.max_rel_error = max(result.max_rel_error, float(rel.max()))
    if bad_nonfinite:
        result.fail(f"{where}: {bad_nonfinite} non-finite values where the reference differs")
        return
    over = diff > tol
    n_over = int(over.sum())
    if n_over:
        idx = int(torch.argmax((diff - tol).flatten()))
        result.fail(
            f"{where}: {n_over} of {exp.numel()} values outside {label}; worst at flat index "
            f"{idx}: got {act.flatten()[idx].item():.8g}, expected {ref.flatten()[idx].item():.8g}"
        )


def runs_agree(
    first: list, second: list, mode: str, expected: list, expected64: list | None = None
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
        _, tol, _, _ = _tolerance(exp, mode, ref64)
        a64, b64 = a.double(), b.double()
        finite = torch.isfinite(a64) & torch.isfinite(b64)
        same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
        if not bool((finite | same).all()):
            return False
        diff = torch.where(finite, (a64 - b64).abs(), torch.zeros_like(a64))
        if bool((diff > tol.to(diff.device)).any()):
            return False
    return True
