"""The agent's tools, one module per action, and the dispatcher that runs a parsed call."""

from __future__ import annotations

import copy
import difflib
import logging
import time

from cuda_gym.actions import ToolCall
from cuda_gym.errors import CudaGymError
from cuda_gym.tools import build, files, profile, skills, submit, verify
from cuda_gym.tools.base import Tool, ToolArgumentError, ToolContext, ToolResult

TOOLS: dict[str, Tool] = {
    tool.name: tool
    for module in (files, build, verify, profile, skills, submit)
    for tool in module.TOOLS
}
CORE_TOOLS = ("edit_file", "compile", "run", "profile")

logger = logging.getLogger(__name__)


def tool_schemas() -> list[dict]:
    """OpenAI function-calling schemas of every tool (a fresh copy each call)."""
    return [copy.deepcopy(tool.schema()) for tool in TOOLS.values()]


def execute_call(ctx: ToolContext, call: ToolCall) -> ToolResult:
    """Run one parsed tool call. Unknown tools and bad arguments give an invalid result."""
    start = time.monotonic()
    tool = TOOLS.get(call.name)
    if tool is None:
        close = difflib.get_close_matches(call.name, list(TOOLS), n=2)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        message = f"Unknown tool {call.name!r}.{hint} Tools: {', '.join(TOOLS)}"
        return ToolResult(
            call.name, ok=False, text=f"Error: {message}", invalid=True, data={"error": message}
        )
    try:
        args = tool.validate(call.arguments)
    except ToolArgumentError as exc:
        return ToolResult(
            call.name, ok=False, text=f"Error: {exc}", invalid=True, data={"error": str(exc)}
        )
    try:
        result = tool.handler(ctx, args)
    except CudaGymError:
        raise  # the judge's or the env's own failure, not the call's
    except (OSError, ValueError, UnicodeError, TypeError, OverflowError) as exc:
        # What the call's own arguments can make a handler raise (a name too long for the
        # file system, a path through a file, a lone surrogate in a file name): the call's
        # error, never one out of env.step.
        message = f"{call.name} failed: {type(exc).__name__}: {exc}"[:1000]
        # (a file-system or encoding error is the call's; anything else may be a bug of ours)
        level = logging.INFO if isinstance(exc, (OSError, UnicodeError)) else logging.WARNING
        logger.log(level, "tool call %s failed: %r", call.name, exc, exc_info=level > logging.INFO)
        result = ToolResult(
            call.name, ok=False, text=f"Error: {message}", invalid=True, data={"error": message}
        )
    result.duration_s = time.monotonic() - start
    return result


__all__ = [
    "CORE_TOOLS",
    "TOOLS",
    "Tool",
    "ToolContext",
    "ToolResult",
    "execute_call",
    "tool_schemas",
]
