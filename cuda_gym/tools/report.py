"""Turn judge results (BuildResult, Verdict) into observation text for the agent."""

from __future__ import annotations

import logging
import re

from cuda_gym.judge import BuildResult, Flag, Verdict

logger = logging.getLogger(__name__)


def log_judge_stages(verdict: Verdict) -> None:
    """Log (INFO) where a judgement stopped and the seconds of each of its stages."""
    logger.info(
        "judge: %s after stage %s in %.1f s (%s)",
        verdict.verdict,
        verdict.stage,
        verdict.duration_s,
        ", ".join(f"{k} {v:.2f} s" for k, v in verdict.stage_times_s.items()) or "no stages",
    )


def _ms(value: float | None) -> str:
    return f"{value:.4f} ms" if value is not None else "n/a"


def _x(value: float | None) -> str:
    return f"{value:.3f}x" if value is not None else "n/a"


def build_text(build: BuildResult, workspace_root: str | None = None) -> str:
    """Observation for the compile tool."""
    if not build.ok:
        return "Build FAILED. First errors:\n" + clean_error(build.errors, workspace_root)
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


def correctness_text(verdict: Verdict, workspace_root: str | None = None) -> str:
    """The correctness part of a verdict (errors trimmed by `clean_error`)."""
    error = clean_error(verdict.error, workspace_root)
    if verdict.stage in ("static", "build") and not verdict.compiled:
        return f"FAIL ({verdict.stage}): {error}"
    if not verdict.compiled or (verdict.error and verdict.stage != "done"):
        return f"FAIL while running the candidate (stage '{verdict.stage}'):\n{error}"
    errs = (
        f"max abs error {verdict.max_abs_error:.3g}, max rel error {verdict.max_rel_error:.3g} "
        f"(precision mode {verdict.tolerance_mode})"
    )
    if verdict.correct:
        n = verdict.trials
        return f"PASS: outputs match the reference on {n} fresh random input sets; {errs}."
    lines = [f"FAIL: outputs do not match the reference; {errs}."]
    lines += [f"- {clean_error(d, workspace_root)}" for d in verdict.details]
    return "\n".join(lines)


def timing_text(verdict: Verdict) -> str:
    """The timing part of a verdict (median times and speedups)."""
    t = verdict.time_ms
    noise = verdict.flags.get(Flag.TIMING_NOISE) or {}
    lines = [
        f"Timing on {verdict.device_name} (median of timed runs):",
        f"  candidate      {_ms(t.get('candidate'))}",
        f"  eager PyTorch  {_ms(t.get('eager'))}   speedup {_x(verdict.speedup_vs_eager)}"
        + _noise_note(verdict.speedup_vs_eager, noise.get("eager")),
        f"  torch.compile  {_ms(t.get('compile'))}   speedup {_x(verdict.speedup_vs_compile)}"
        + _noise_note(verdict.speedup_vs_compile, noise.get("compile")),
    ]
    return "\n".join(lines)


def _noise_note(speedup: float | None, noise: float | None) -> str:
    """Where a speedup above 1 is within its timing noise (it earns no milestone)."""
    if speedup is None or noise is None or not 1.0 < speedup <= 1.0 + noise:
        return ""
    return f"   (within the timing noise of +-{100 * noise:.0f}%: not counted as faster)"


def reward_text(verdict: Verdict) -> str:
    """One line stating the milestone reward this verdict earns."""
    return f"Milestone reward for this state: {verdict.reward:g} (verdict: {verdict.verdict})."


TRACEBACK_HEAD = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+')
_QUALIFIED_EXC = re.compile(r"^((?:[A-Za-z_]\w*\.)+)([A-Z]\w*:)")
_ABS_PATH = re.compile(r"(?<![\w<>.])/(?:[\w.@+~-]+/)+[\w.@+~-]*")
_PYTHON_LIB = re.compile(r"/lib/python3\.\d+/")


def _is_candidate_file(path: str) -> bool:
    """Whether a traceback frame's file is the agent's own code (model_new.py, kernels/)."""
    return (
        path == "model_new.py"
        or path.endswith("/model_new.py")
        or path.startswith("kernels/")
        or "/kernels/" in path
        or "/solution/" in path
    )


def _scrub_path(path: str, workspace_root: str | None) -> str:
    """A host path as the agent should see it: workspace-relative, or a placeholder."""
    if workspace_root and path.startswith(workspace_root.rstrip("/") + "/"):
        return path[len(workspace_root.rstrip("/")) + 1 :]
    if "/site-packages/" in path:
        return "<site-packages>/" + path.split("/site-packages/", 1)[1]
    if "/solution/" in path:  # the judge's snapshot of the workspace
        return path.split("/solution/", 1)[1]
    if "cuda_gym" in path and "/src/" in path:  # a build directory's copy of kernels/
        return "kernels/" + path.rsplit("/src/", 1)[1]
    if "cuda_gym" in path or path.startswith(("/tmp/", "/dev/shm/")):
        return "<judge>"
    match = _PYTHON_LIB.search(path)
    if match:
        return "<python>/" + path[match.end() :]
    return path


def scrub_paths(text: str, workspace_root: str | None = None) -> str:
    """Replace host paths in `text` with workspace-relative names, `<judge>` or `<site-packages>`.

    Args:
        text: Observation text (an error, a traceback, compiler output).
        workspace_root: The episode's workspace directory, whose files are shown relative.
    """
    return _ABS_PATH.sub(lambda m: _scrub_path(m.group(0), workspace_root), text)


def trim_traceback(text: str) -> str:
    """Keep only the candidate's own frames (model_new.py, kernels/) of each Python traceback.

    The harness's frames (the judge's worker, torch's module machinery, the op ban) are
    replaced by a count; a traceback's closing exception line is kept unless it repeats the
    text's first line, and module prefixes of exception names are dropped.
    """
    if TRACEBACK_HEAD not in text:
        return text
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != TRACEBACK_HEAD:
            out.append(lines[i])
            i += 1
            continue
        i += 1
        kept: list[str] = []
        hidden = 0
        while i < len(lines) and lines[i].startswith("  "):
            match = _FRAME.match(lines[i])
            body = [lines[i]]
            i += 1
            while i < len(lines) and lines[i].startswith("    "):
                body.append(lines[i])
                i += 1
            if match and _is_candidate_file(match.group(1)):
                kept += body
            else:
                hidden += 1
        if kept:
            note = f" ({hidden} harness frames hidden)" if hidden else ""
            out.append(f"Traceback of your code{note}:")
            out += kept
        if i < len(lines):  # the exception line closing the traceback
            closing = _QUALIFIED_EXC.sub(r"\2", lines[i])
            i += 1
            if not (out and closing.strip() == out[0].strip()):
                out.append(closing)
    return "\n".join(out).rstrip()


def clean_error(text: str | None, workspace_root: str | None = None) -> str:
    """An error for the agent: tracebacks cut to the candidate's frames, host paths replaced."""
    if not text:
        return ""
    return scrub_paths(trim_traceback(text), workspace_root)
