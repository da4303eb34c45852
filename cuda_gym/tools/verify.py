"""The run tool: build, run ModelNew on fresh random inputs and compare with the reference."""

from __future__ import annotations

from cuda_gym.tools.base import Tool, ToolContext, ToolResult, truncate_text
from cuda_gym.tools.report import correctness_text, log_judge_stages


def judge_data(verdict) -> dict:
    """The verdict fields worth keeping in `info` for one tool call; logs the judge's stages."""
    log_judge_stages(verdict)
    return {
        "compiled": verdict.compiled,
        "correct": verdict.correct,
        "stage": verdict.stage,
        "reward": verdict.reward,
        "max_abs_error": verdict.max_abs_error,
        "max_rel_error": verdict.max_rel_error,
        "speedup_vs_eager": verdict.speedup_vs_eager,
        "speedup_vs_compile": verdict.speedup_vs_compile,
        "time_ms": dict(verdict.time_ms),
        "error": verdict.error,
        "build_cached": verdict.build.cached if verdict.build is not None else None,
        "stage_times_s": dict(verdict.stage_times_s),
        "judge_wait_s": round(verdict.waited_s(), 4),
        "restored_files": [],
    }


def restore_note(ctx: ToolContext, data: dict) -> str:
    """Restore tampered read-only files; return a note for the agent if any were touched."""
    restored = ctx.workspace.restore_protected()
    data["restored_files"] = restored
    if restored:
        return f"Note: restored read-only file(s) that had changed: {', '.join(restored)}.\n"
    return ""


def run_candidate(ctx: ToolContext, args: dict) -> ToolResult:
    """Check correctness only (no timing)."""
    note_data: dict = {}
    note = restore_note(ctx, note_data)
    verdict = ctx.judge.evaluate(ctx.task, ctx.workspace.root, timing=False)
    data = judge_data(verdict) | {"restored_files": note_data["restored_files"]}
    return ToolResult(
        "run",
        ok=verdict.correct,
        text=truncate_text(
            note + correctness_text(verdict, str(ctx.workspace.root)), ctx.max_output_chars
        ),
        data=data,
        verdict=verdict,
    )


TOOLS = [
    Tool(
        "run",
        "Build if needed, run ModelNew on fresh random inputs and compare every output with the "
        "reference Model. Reports pass/fail and the largest errors.",
        {"type": "object", "properties": {}, "required": []},
        run_candidate,
    )
]
