"""AgentText: a Gymnasium space of free text, whose samples are valid tool calls."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym

_SAMPLE_CALLS = (
    {"name": "list_files", "arguments": {}},
    {"name": "read_file", "arguments": {"path": "model.py"}},
    {"name": "read_file", "arguments": {"path": "model_new.py"}},
    {"name": "read_skill", "arguments": {}},
    {"name": "read_skill", "arguments": {"name": "workspace"}},
)


class AgentText(gym.Space[str]):
    """Any Python string up to `max_length` characters.

    Gymnasium's `Text` space only admits a fixed character set, which LLM output (code, Unicode)
    does not respect. `sample()` returns a harmless valid tool call (list or read files, read a
    skill) so that generic tooling such as `check_env` exercises real code paths.

    Args:
        max_length: Longest string the space contains.
        seed: Seed for `sample()`.
    """

    def __init__(self, max_length: int, seed: int | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = int(max_length)

    @property
    def is_np_flattenable(self) -> bool:
        """Free text has no fixed-size numpy form."""
        return False

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> str:
        """A valid read-only tool call in Hermes `<tool_call>` text form."""
        call = _SAMPLE_CALLS[int(self.np_random.integers(len(_SAMPLE_CALLS)))]
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"

    def contains(self, x: Any) -> bool:
        """True for a str of at most `max_length` characters."""
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AgentText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AgentText) and other.max_length == self.max_length
