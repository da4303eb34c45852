"""CudaKernelSingleTurn-v0: one reply holds the whole solution, which is judged once.

The single-turn warm-up stage of the published recipe. The reply writes files with `write_file`
/ `edit_file` calls (either text format), or holds one fenced ```python block that becomes
`model_new.py` (e.g. a KernelBench-style `load_inline` solution). The env then submits: the
episode terminates after that one step with the milestone reward.
"""

from __future__ import annotations

import re
from typing import Any

from cuda_gym.actions import MAX_TOOL_CALLS, parse_action
from cuda_gym.env import MAX_ACTION_CHARS, CudaKernelEnv

FILE_TOOLS = ("write_file", "edit_file")
_PYTHON_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(.*?)```", re.DOTALL)

INSTRUCTIONS = """
## Single turn
This episode has exactly one turn. Your one reply must hold the whole solution: write_file /
edit_file calls for model_new.py and any kernels/ files, or a single ```python code block that
becomes model_new.py. No other tool runs; the workspace is then judged once."""


class CudaKernelSingleTurnEnv(CudaKernelEnv):
    """CudaKernel-v0 reduced to one reply that is judged once.

    ## Action
    Assistant text (or parsed calls) with `write_file`/`edit_file` calls, or one fenced
    ```python block holding model_new.py. Other tools are ignored (reported in
    `info["parse_errors"]`). A reply with neither is judged as it stands (reward -1).

    ## Episode End
    Always `terminated` after the first step (`stop_reason` "submit").

    ## Arguments
    As CudaKernel-v0; `max_turns` is fixed to 1.

    ## Version History
    - v0: first release.
    """

    def __init__(self, config=None, render_mode: str | None = None, **overrides: Any) -> None:
        overrides["max_turns"] = 1
        super().__init__(config, render_mode=render_mode, **overrides)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode; the task statement ends with the single-turn rules."""
        obs, info = super().reset(seed=seed, options=options)
        return obs + INSTRUCTIONS, info

    def step(self, action: Any):
        """Apply the reply's file writes, then submit; see the class docstring."""
        calls, problems = solution_calls(action)
        obs, reward, terminated, truncated, info = super().step(
            [*calls, {"name": "submit", "arguments": {}}]
        )
        if problems:
            info["parse_errors"] = problems + list(info.get("parse_errors", []))
            info["invalid_action"] = not calls
            obs = "\n".join(f"Note: {p}" for p in problems) + "\n\n" + obs
        return obs, reward, terminated, truncated, info


def solution_calls(action: Any) -> tuple[list[dict], list[str]]:
    """The file-writing calls of a single-turn reply, and what was ignored or wrong."""
    parsed = parse_action(action, max_chars=MAX_ACTION_CHARS)
    problems = list(parsed.errors) if parsed.calls else []
    calls = []
    for call in parsed.calls:
        if call.name in FILE_TOOLS:
            calls.append({"name": call.name, "arguments": dict(call.arguments)})
        elif call.name != "submit":
            problems.append(f"{call.name!r} does not run in a single-turn episode; ignored.")
    if not calls and isinstance(action, str):
        blocks = _PYTHON_BLOCK.findall(action)
        if blocks:
            content = blocks[-1]
            calls.append(
                {"name": "write_file", "arguments": {"path": "model_new.py", "content": content}}
            )
    if not calls:
        problems.append("The reply holds no write_file/edit_file call and no ```python block.")
    if len(calls) >= MAX_TOOL_CALLS:  # the env's submit must still fit in the action
        problems.append(
            f"{len(calls)} file calls: only the first {MAX_TOOL_CALLS - 1} were applied "
            "(the submit that follows them is the last call an action may hold)."
        )
        calls = calls[: MAX_TOOL_CALLS - 1]
    return calls, problems
