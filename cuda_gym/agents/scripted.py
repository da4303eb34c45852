"""The scripted reference agent: plays a fixed list of actions, e.g. writing a known solution."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from cuda_gym.agents.base import Agent, AgentReply

SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'


def tool_call_text(tool: str, **arguments: Any) -> str:
    """A Hermes `<tool_call>` JSON block."""
    return f"<tool_call>\n{json.dumps({'name': tool, 'arguments': arguments})}\n</tool_call>"


def write_file_text(path: str, content: str) -> str:
    """A write_file call in the XML-parameter form (code travels as raw text)."""
    return (
        f"<tool_call>\n<function=write_file>\n<parameter=path>\n{path}\n</parameter>\n"
        f"<parameter=content>\n{content}\n</parameter>\n</function>\n</tool_call>"
    )


class ScriptedAgent(Agent):
    """Plays `actions` in order, then submits (once) if the episode is still running.

    Args:
        actions: Actions for `env.step` (text or parsed calls), in order.
        label: A name for reports, e.g. the solution file it plays.
    """

    name = "scripted"

    def __init__(self, actions: Sequence[Any], label: str = "") -> None:
        self.actions = list(actions)
        self.label = label
        self._next = 0

    @classmethod
    def for_files(
        cls, files: Mapping[str, str], label: str = "", run: bool = True
    ) -> ScriptedAgent:
        """An agent that reads the task, writes `files` (path -> text), runs them and submits.

        Args:
            files: Workspace files to write, e.g. {"model_new.py": ..., "kernels/k.cpp": ...}.
            label: A name for reports.
            run: Call the `run` tool (correctness check) before submitting.
        """
        actions = [tool_call_text("read_file", path="model.py")]
        # model_new.py last, so the kernels it imports are in place when it is written.
        for path in sorted(files, key=lambda p: (p == "model_new.py", p)):
            actions.append(write_file_text(path, files[path]))
        if run:
            actions.append(tool_call_text("run"))
        actions.append(SUBMIT)
        return cls(actions, label=label)

    @classmethod
    def demo(cls, device: str) -> ScriptedAgent:
        """The `cuda-gym demo` episode's actions (task `sigmoid_gated_multiply`)."""
        from cuda_gym.demo import scripted_actions

        return cls(scripted_actions(device), label="demo")

    def reset(self, observation: str, info: dict) -> None:
        """Start again from the first action."""
        self._next = 0

    def act(self) -> AgentReply:
        """The next scripted action; `submit` once the script is exhausted."""
        if self._next < len(self.actions):
            action = self.actions[self._next]
        else:
            action = SUBMIT
        self._next += 1
        content = action if isinstance(action, str) else json.dumps(action, default=repr)
        return AgentReply(action=action, message={"role": "assistant", "content": content})

    def describe(self) -> dict:
        """Name, label and number of scripted actions."""
        return {"agent": self.name, "label": self.label, "actions": len(self.actions)}
