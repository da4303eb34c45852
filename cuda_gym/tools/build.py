"""The compile tool: build kernels/ into the `kernels_ext` extension."""

from __future__ import annotations

from cuda_gym.tools.base import Tool, ToolContext, ToolResult, truncate_text
from cuda_gym.tools.report import build_text


def compile_kernels(ctx: ToolContext, args: dict) -> ToolResult:
    """Build the workspace's kernels and report the compiler's first errors."""
    build = ctx.judge.build(ctx.workspace.root)
    return ToolResult(
        "compile",
        ok=build.ok,
        text=truncate_text(build_text(build, str(ctx.workspace.root)), ctx.max_output_chars),
        data={
            "ok": build.ok,
            "cached": build.cached,
            "duration_s": build.duration_s,
            "sources": list(build.sources),
            "errors": build.errors,
            "judge_wait_s": round(build.wait_s, 4),
        },
    )


TOOLS = [
    Tool(
        "compile",
        "Build every .cu/.cpp file in kernels/ into one extension, importable in model_new.py as "
        "`import kernels_ext`. Reports the compiler's first errors.",
        {"type": "object", "properties": {}, "required": []},
        compile_kernels,
    )
]
