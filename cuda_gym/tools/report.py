"""Turn judge results (BuildResult, Verdict) into observation text for the agent."""

from __future__ import annotations

from cuda_gym.judge import BuildResult, Verdict


def _ms(value: float | None) -> str:
    return f"{value:.4f} ms" if value is not None else "n/a"


def _x(value: float | None) -> str:
    return f"{value:.3f}x" if value is not None else "n/a"


def build_text(build: BuildResult) -> str:
    """Observation for the compile tool."""
    if not build.ok:
        return "Build FAILED. First errors:\n" + build.errors
    if build.module_dir is None:
        return (
            "Nothing to build: kernels/ holds no compilation units. "
            "Add kernels/*.cu (cuda) or kernels/*.cpp (cpu) files."
        )
    how = "reused a cached build" if build.cached else f"built in {build.duration_s:.1f} s"
    return (
        f"Build OK ({how}): {', '.join(build.sources)} -> module kernels_ext "
        "(use `import kernels_ext` in model_new.py)."
    )


def correctness_text(verdict: Verdict) -> str:
    """The correctness part of a verdict."""
    if verdict.stage in ("static", "build") and not verdict.compiled:
        return f"FAIL ({verdict.stage}): {verdict.error}"
    if not verdict.compiled or (verdict.error and verdict.stage != "done"):
        return f"FAIL while running the candidate (stage '{verdict.stage}'):\n{verdict.error}"
    errs = (
        f"max abs error {verdict.max_abs_error:.3g}, max rel error {verdict.max_rel_error:.3g} "
        f"(precision mode {verdict.mode})"
    )
    if verdict.correct:
        n = verdict.trials
        return f"PASS: outputs match the reference on {n} fresh random input sets; {errs}."
    lines = [f"FAIL: outputs do not match the reference; {errs}."]
    lines += [f"- {d}" for d in verdict.details]
    return "\n".join(lines)


def timing_text(verdict: Verdict) -> str:
    """The timing part of a verdict (median times and speedups)."""
    t = verdict.time_ms
    return "\n".join(
        [
            f"Timing on {verdict.device_name} (median of timed runs):",
            f"  candidate      {_ms(t.get('candidate'))}",
            f"  eager PyTorch  {_ms(t.get('eager'))}   speedup {_x(verdict.speedup_vs_eager)}",
            f"  torch.compile  {_ms(t.get('compile'))}   speedup {_x(verdict.speedup_vs_compile)}",
        ]
    )


def reward_text(verdict: Verdict) -> str:
    """One line stating the milestone reward this verdict earns."""
    return f"Milestone reward for this state: {verdict.reward:g} (verdict: {verdict.verdict})."
