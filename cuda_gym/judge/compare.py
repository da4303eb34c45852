"""Compare candidate outputs with reference outputs, trial by trial, in the trusted process."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

MAX_DETAILS = 8


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
    expected: list[list], actual: list[list], atol: float, rtol: float
) -> Comparison:
    """Check `actual[trial][i]` against `expected[trial][i]` with `allclose(atol, rtol)`.

    Outputs must be plain tensors with the reference's shape and dtype; a non-finite value is
    accepted only where the reference has the same non-finite value.
    """
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
            if type(act) is not torch.Tensor:
                result.fail(f"{where}: expected a torch.Tensor, got {type(act).__name__}")
                continue
            if act.shape != exp.shape:
                result.fail(f"{where}: shape {tuple(act.shape)} != expected {tuple(exp.shape)}")
                continue
            if act.dtype != exp.dtype:
                result.fail(f"{where}: dtype {act.dtype} != expected {exp.dtype}")
                continue
            _compare_values(result, where, exp, act, atol, rtol)
    return result


def _compare_values(
    result: Comparison, where: str, exp: torch.Tensor, act: torch.Tensor, atol: float, rtol: float
) -> None:
    if not exp.is_floating_point():
        mismatched = int((exp != act).sum())
        if mismatched:
            result.fail(f"{where}: {mismatched} of {exp.numel()} values differ")
        return
    exp64, act64 = exp.double(), act.double()
    finite = torch.isfinite(exp64)
    same_nonfinite = (~finite) & ((exp64 == act64) | (torch.isnan(exp64) & torch.isnan(act64)))
    bad_nonfinite = int(((~finite) & ~same_nonfinite).sum()) + int(
        (finite & ~torch.isfinite(act64)).sum()
    )
    diff = (act64 - exp64).abs()
    diff = torch.where(finite & torch.isfinite(act64), diff, torch.zeros_like(diff))
    if diff.numel():
        result.max_abs_error = max(result.max_abs_error, float(diff.max()))
        rel = diff / (exp64.abs() + atol)
        result.max_rel_error = max(result.max_rel_error, float(rel.max()))
    if bad_nonfinite:
        result.fail(f"{where}: {bad_nonfinite} non-finite values where the reference differs")
        return
    tol = atol + rtol * exp64.abs()
    over = diff > tol
    n_over = int(over.sum())
    if n_over:
        idx = int(torch.argmax((diff - tol).flatten()))
        result.fail(
            f"{where}: {n_over} of {exp.numel()} values outside atol={atol:g}, rtol={rtol:g}; "
            f"worst at flat index {idx}: got {act.flatten()[idx].item():.6g}, "
            f"expected {exp.flatten()[idx].item():.6g}"
        )
