"""Trivial answers (zeros, a constant, the input, the mean) used to flag degenerate tasks.

A task whose reference outputs a trivial answer can match under a tolerance mode rewards a
kernel that computes nothing; the judge probes every task once and records which ones pass.
"""

from __future__ import annotations

import torch

NAMES = ("zeros", "mean", "input")

# Elements summed at once for the mean (bounded extra memory for outputs of many GiB).
_CHUNK = 1 << 24


def finite_mean(out: torch.Tensor) -> float:
    """The mean of the finite values of a float tensor (0.0 when there are none)."""
    total, count = 0.0, 0
    for part in out.reshape(-1).split(_CHUNK):
        finite = torch.isfinite(part)
        total += float(torch.where(finite, part.double(), 0).sum())
        count += int(finite.sum())
    return total / count if count else 0.0


def trivial_answer(name: str, outs: list, ins: list) -> list | None:
    """One trial's outputs under one strategy; None when "input" has no matching input.

    Args:
        name: One of NAMES.
        outs: The reference outputs of the trial (used only for shapes, dtypes and the mean).
        ins: The trial's inputs.
    """
    answer = []
    for out in outs:
        if not isinstance(out, torch.Tensor):
            answer.append(out)
        elif name == "zeros" or (name == "mean" and not out.is_floating_point()):
            answer.append(torch.zeros_like(out))
        elif name == "mean":
            answer.append(torch.full_like(out, finite_mean(out)))
        else:
            same = [
                x
                for x in ins
                if isinstance(x, torch.Tensor) and x.shape == out.shape and x.dtype == out.dtype
            ]
            if not same:
                return None
            answer.append(same[0].clone())
    return answer


def trivial_answers(expected: list[list], inputs: list[list]) -> dict[str, list[list]]:
    """Candidate outputs, per trial, for each trivial strategy.

    Args:
        expected: Reference outputs per trial (used only for shapes, dtypes and the mean).
        inputs: The inputs of each trial.

    Returns:
        {"zeros": ..., "mean": ..., "input": ...}; "input" only when an input has the shape
        and dtype of every output.
    """
    answers = {
        name: [trivial_answer(name, outs, ins) for outs, ins in zip(expected, inputs)]
        for name in NAMES
    }
    if any(trial is None for trial in answers["input"]):
        del answers["input"]
    return answers
