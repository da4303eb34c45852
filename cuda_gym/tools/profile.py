"""The profile tool: correctness, timing against eager and torch.compile, a kernel table."""

from __future__ import annotations

from cuda_gym.tools.base import Tool, ToolContext, ToolResult, truncate_text
from cuda_gym.tools.report import correctness_text, reward_text, timing_text
from cuda_gym.tools.verify import judge_data, restore_note


def profile_candidate(ctx: ToolContext, args: dict) -> ToolResult:
    """Time the candidate and the baselines and list its top kernels."""
    note_data: dict = {}
    note = restore_note(ctx, note_data)
    verdict = ctx.judge.evaluate(ctx.task, ctx.workspace.root, timing=True, profile=True)
    parts = [note + correctness_text(verdict, str(ctx.workspace.root))]
    if verdict.stage == "done":
        parts.append(timing_text(verdict))
        if verdict.profile_table:
            parts.append("Top kernels/operators of the candidate:\n" + verdict.profile_table)
        parts.append(reward_text(verdict))
    data = judge_data(verdict) | {"restored_files": note_data["restored_files"]}
    return ToolResult(
        "profile",
        ok=verdict.correct,
        text=truncate_text("\n\n".join(parts), ctx.max_output_chars),
        data=data,
        verdict=verdict,
    )


TOOLS = [
    Tool(
        "profile",
        "Check correctness, then time ModelNew against eager PyTorch and torch.compile (median "
        "ms, speedups) and list the candidate's most expensive kernels/operators.",
        {"type": "object", "properties": {}, "required": []},
        profile_candidate,
    )
]
