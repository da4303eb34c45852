"""The judge's result types and the milestone reward."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


def milestone_reward(
    correct: bool,
    speedup_vs_eager: float | None,
    speedup_vs_compile: float | None,
    margin: float = 0.05,
) -> float:
    """The CUDA-Agent milestone reward.

    Returns:
        -1 when incorrect (or not built); 1 when correct; 2 when correct and more than `margin`
        faster than eager; 3 when correct and more than `margin` faster than both eager and
        torch.compile. A baseline that was not measured cannot be beaten.
    """
    if not correct:
        return -1.0
    beats_eager = speedup_vs_eager is not None and speedup_vs_eager > 1.0 + margin
    beats_compile = speedup_vs_compile is not None and speedup_vs_compile > 1.0 + margin
    if beats_eager and beats_compile:
        return 3.0
    if beats_eager:
        return 2.0
    return 1.0


def compute_reward(
    kind: str,
    correct: bool,
    speedup_vs_eager: float | None,
    speedup_vs_compile: float | None,
    margin: float = 0.05,
) -> float:
    """The reward of a judged candidate.

    Args:
        kind: "milestone" (see `milestone_reward`); "speedup": compile time / candidate time
            (eager when compile was not measured), -1 when incorrect; "log_speedup": the natural
            log of that speedup clipped to [-1, 3], -1 when incorrect.
        correct: The candidate passed every check.
        speedup_vs_eager: Eager time / candidate time.
        speedup_vs_compile: torch.compile time / candidate time.
        margin: Milestone margin.
    """
    if kind == "milestone":
        return milestone_reward(correct, speedup_vs_eager, speedup_vs_compile, margin)
    if not correct:
        return -1.0
    speedup = speedup_vs_compile if speedup_vs_compile is not None else speedup_vs_eager
    if speedup is None or speedup <= 0:
        return 0.0 if kind == "log_speedup" else 1.0
    if kind == "speedup":
        return float(speedup)
    if kind == "log_speedup":
        return float(min(3.0, max(-1.0, math.log(speedup))))
    raise ValueError(f"unknown reward kind {kind!r}")


@dataclass(frozen=True)
class BuildResult:
    """Outcome of building a workspace's kernels/ into the `kernels_ext` extension.

    Attributes:
        ok: True when the extension built and imported (or there was nothing to build).
        module_dir: Directory holding `kernels_ext.so`, or None when nothing was built.
        log: Compiler output, bounded.
        errors: The compiler's first errors, for the agent; empty on success.
        duration_s: Wall-clock seconds spent, near zero for a cache hit.
        cached: True when an identical build was reused.
        sources: Relative paths of the compiled sources.
    """

    ok: bool
    module_dir: str | None
    log: str = ""
    errors: str = ""
    duration_s: float = 0.0
    cached: bool = False
    sources: tuple[str, ...] = ()


@dataclass
class Verdict:
    """Everything the judge concluded about one candidate.

    Attributes:
        compiled: The sources built and `model_new.py` imported.
        correct: Every output of every trial matched the reference within tolerance.
        verdict: "accept" when correct, else "reject".
        reward: The milestone reward (see `milestone_reward`).
        stage: Where it stopped: "static", "build", "load", "run", "compare", or "done".
        error: A short message for the agent when something failed.
        speedup_vs_eager: Eager median time / candidate median time, when timed.
        speedup_vs_compile: torch.compile median time / candidate median time, when timed.
        time_ms: Median milliseconds: "candidate", "eager", "compile" (None if not measured).
        violations: Rule violations found (empty in a clean run).
        max_abs_error: Largest |candidate - reference| over all outputs and trials.
        max_rel_error: Largest |candidate - reference| / (|reference| + atol).
        checks: Which checks ran and whether each passed (None: not run).
        flags: Facts worth auditing that do not change the verdict (e.g. a degenerate task).
        trials: Number of input sets checked.
        mode: Precision mode ("strict", "kernelbench" or "paper").
        reward_kind: Which reward function produced `reward`.
        device: "cuda" or "cpu"; `device_name` the GPU or CPU model.
        build: The BuildResult, when a build ran.
        profile_table: Top kernels/operators by device time, when profiled.
        details: Per-trial mismatch notes and other diagnostics.
        duration_s: Wall-clock seconds of the whole evaluation.
        stage_times_s: Wall-clock seconds per step: "build", "candidate", "reference".
    """

    compiled: bool = False
    correct: bool = False
    verdict: str = "reject"
    reward: float = -1.0
    stage: str = "static"
    error: str | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    time_ms: dict[str, float | None] = field(
        default_factory=lambda: {"candidate": None, "eager": None, "compile": None}
    )
    violations: list[str] = field(default_factory=list)
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    trials: int = 0
    mode: str = ""
    reward_kind: str = "milestone"
    checks: dict[str, bool | None] = field(default_factory=dict)
    flags: dict[str, object] = field(default_factory=dict)
    device: str = ""
    device_name: str = ""
    build: BuildResult | None = None
    profile_table: str | None = None
    details: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    stage_times_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Verdict:
        """The Verdict that `to_dict` produced (e.g. after crossing a process boundary)."""
        fields = dict(data)
        if isinstance(fields.get("build"), dict):
            build = dict(fields["build"])
            build["sources"] = tuple(build.get("sources", ()))
            fields["build"] = BuildResult(**build)
        return cls(**fields)
