"""The tool contract: a Tool (schema + handler), its context, its result, argument checking."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cuda_gym.judge import Verdict
from cuda_gym.judge.client import JudgeLike
from cuda_gym.skills import Skill
from cuda_gym.tasks import Task
from cuda_gym.workspace import Workspace


class ToolArgumentError(ValueError):
    """A tool call's arguments do not match the tool's schema (shown to the agent)."""


@dataclass
class ToolContext:
    """What a tool may touch during one episode.

    Attributes:
        workspace: The episode's files.
        task: The task, specialised for the device.
        judge: The judge for the device (a JudgeClient, or a stand-in with its members).
        skills: Skill documents by name.
        max_output_chars: Bound on the text a tool returns.
    """

    workspace: Workspace
    task: Task
    judge: JudgeLike
    skills: dict[str, Skill]
    max_output_chars: int = 16_000


@dataclass
class ToolResult:
    """What one tool call produced.

    Attributes:
        name: The tool's name (as called).
        ok: The tool did what was asked (a failing build or wrong output is ok=False).
        text: The observation text for the agent.
        data: Structured details for `info`.
        invalid: The call itself was malformed (unknown tool, bad arguments).
        ends_episode: The call ends the episode (submit).
        verdict: The judge's verdict, for run/profile/submit.
        duration_s: Wall-clock seconds the call took.
    """

    name: str
    ok: bool
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    invalid: bool = False
    ends_episode: bool = False
    verdict: Verdict | None = None
    duration_s: float = 0.0


@dataclass(frozen=True)
class Tool:
    """An action the agent can take.

    Attributes:
        name: Function name in tool calls.
        description: What it does, for the agent.
        parameters: JSON Schema (type "object") of its arguments.
        handler: `handler(ctx, args) -> ToolResult`, given validated arguments.
    """

    name: str
    description: str
    parameters: dict
    handler: Callable[[ToolContext, dict], ToolResult]

    def schema(self) -> dict:
        """The OpenAI function-calling schema of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validate(self, arguments: dict) -> dict:
        """Check and coerce arguments (XML-form calls pass every value as a string).

        Raises:
            ToolArgumentError: Missing, unknown or mistyped arguments.
        """
        props = self.parameters.get("properties", {})
        required = self.parameters.get("required", [])
        unknown = sorted(set(arguments) - set(props))
        if unknown:
            raise ToolArgumentError(
                f"{self.name}: unknown argument(s) {', '.join(unknown)}; "
                f"expected {', '.join(props) or 'no arguments'}"
            )
        missing = [name for name in required if name not in arguments]
        if missing:
            raise ToolArgumentError(
                f"{self.name}: missing required argument(s) {', '.join(missing)}"
            )
        return {k: _coerce(self.name, k, v, props[k]) for k, v in arguments.items()}


def _coerce(tool: str, key: str, value: Any, spec: dict) -> Any:
    kind = spec.get("type")
    where = f"{tool}: argument {key!r}"
    if kind == "string":
        if not isinstance(value, str):
            raise ToolArgumentError(f"{where} must be a string")
        return value
    if kind == "integer":
        if isinstance(value, bool):
            raise ToolArgumentError(f"{where} must be an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,18}", value.strip()):
            return int(value.strip())
        raise ToolArgumentError(f"{where} must be an integer")
    if kind == "array":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ToolArgumentError(f"{where} must be a JSON array: {exc}") from exc
        if not isinstance(value, list):
            raise ToolArgumentError(f"{where} must be an array")
        return value
    return value


def truncate_text(text: str, max_chars: int) -> str:
    """Keep the head and tail of a long text, with a marker saying how much was cut.

    The result is at most `max_chars` characters long.
    """
    if len(text) <= max_chars:
        return text
    # Size the marker for the largest count it can show, so the result never exceeds max_chars.
    budget = max(0, max_chars - len(f"\n[... {len(text)} characters cut ...]\n"))
    marker = f"\n[... {len(text) - budget} characters cut ...]\n"
    head = int(budget * 0.7)
    tail = budget - head
    return f"{text[:head]}{marker}{text[len(text) - tail :] if tail else ''}"
