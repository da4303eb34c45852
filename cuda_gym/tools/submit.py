"""The submit tool: the final judgement, which ends the episode."""

from __future__ import annotations

from cuda_gym.tools.base import Tool, ToolContext, ToolResult, truncate_text
from cuda_gym.tools.report import correctness_text, reward_text, timing_text
from cuda_gym.tools.verify import judge_data, restore_note


def submit(ctx: ToolContext, args: dict) -> ToolResult:
    """Judge the workspace as it stands and end the episode."""
    note_data: dict = {}
    note = restore_note(ctx, note_data)
    verdict = ctx.judge.evaluate(ctx.task, ctx.workspace.root, timing=True)
    parts = [
        "Submitted. Final judgement:",
        note + correctness_text(verdict, str(ctx.workspace.root)),
    ]
    if verdict.stage == "done":
        parts.append(timing_text(verdict))
    parts.append(reward_text(verdict))
    data = judge_data(verdict) | {"restored_files": note_data["restored_files"]}
    return ToolResult(
        "submit",
        ok=verdict.correct,
        text=truncate_text("\n\n".join(parts), ctx.max_output_chars),
        data=data,
        ends_episode=True,
        verdict=verdict,
    )


TOOLS = [
    Tool(
        "submit",
        "Submit the current model_new.py and kernels/ for the final judgement; ends the episode.",
        {"type": "object", "properties": {}, "required": []},
        submit,
    )
]
