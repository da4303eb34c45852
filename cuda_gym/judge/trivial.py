"""Trivial answers (zeros, a constant, the input, the mean) used to flag degenerate tasks.

A task whose reference outputs a trivial answer can match under a tolerance mode rewards a
kernel that computes nothing; the judge probes every task once and records which ones pass.
"""

from __future__ import annotations

import torch


def trivial_answers(expected: list[list], inputs: list[list]) -> dict[str, list[list]]:
    """Candidate outputs, per trial, for each trivial strategy.

    Args:
        expected: Reference outputs per trial (used only for shapes, dtypes and the mean).
        inputs: The inputs of each trial.

    Returns:
        {"zeros": ..., "mean": ..., "input": ...}; "input" only when an input has the shape
        and dtype of every output.
    """
    answers: dict[str, list[list]] = {"zeros": [], "mean": [], "input": []}
    for outs, ins in zip(expected, inputs):
        zeros, means, passthrough = [], [], []
        for out in outs:
            if not isinstance(out, torch.Tensor):
                zeros.append(out)
                means.append(out)
                passthrough.append(out)
                continue
            zeros.append(torch.zeros_like(out))
            if out.is_floating_point():
                finite = out[torch.isfinite(out)]
                value = float(finite.double().mean()) if finite.numel() else 0.0
                means.append(torch.full_like(out, value))
            else:
                means.append(torch.zeros_like(out))
            same = [
                x
                for x in ins
                if isinstance(x, torch.Tensor) and x.shape == out.shape and x.dtype == out.dtype
            ]
            passthrough.append(same[0].clone() if same else None)
        answers["zeros"].append(zeros)
        answers["mean"].append(means)
        answers["input"].append(passthrough)
    if any(o is None for trial in answers["input"] for o in trial):
        del answers["input"]
    return answers
