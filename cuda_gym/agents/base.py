"""The agent contract: an agent reads observations and returns actions for `env.step`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from cuda_gym.errors import CudaGymError

USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


class AgentError(CudaGymError, RuntimeError):
    """The agent could not produce an action (e.g. its model server failed after retries).

    This is an infrastructure failure, not a bad kernel: the harness records it as an error and
    never scores it as the agent's failure.
    """


@dataclass
class AgentReply:
    """One action of an agent.

    Attributes:
        action: What goes to `env.step`: assistant text, or an assistant message with
            `tool_calls`.
        message: The assistant message as it enters the conversation (OpenAI format).
        usage: Tokens spent on this reply: prompt_tokens, completion_tokens, total_tokens.
        latency_s: Seconds the agent took to answer.
        attempts: Requests made for this reply (1 when the first request succeeded).
    """

    action: Any
    message: dict
    usage: dict[str, int] = field(default_factory=dict)
    latency_s: float = 0.0
    attempts: int = 1


class Agent(ABC):
    """An agent playing CudaKernel-v0 episodes.

    The episode runner calls `reset` with the task statement, then alternates `act` (the next
    action) and `observe` (the env's answer to it) until the episode ends.
    """

    name = "agent"

    @abstractmethod
    def reset(self, observation: str, info: dict) -> None:
        """Start a new episode from the env's first observation and info."""

    @abstractmethod
    def act(self) -> AgentReply:
        """The next action.

        Raises:
            AgentError: No action can be produced (server down, replay exhausted, ...).
        """

    def observe(self, observation: str, info: dict) -> None:  # noqa: B027 - optional hook
        """Take in the env's answer to the last action (its observation and step info)."""

    def describe(self) -> dict:
        """A JSON-ready description of the agent for reports (no secrets)."""
        return {"agent": self.name}


def add_usage(total: dict[str, int], usage: dict[str, int] | None) -> dict[str, int]:
    """Add one reply's token usage to a running total (missing keys count as 0)."""
    for key in USAGE_KEYS:
        total[key] = total.get(key, 0) + int((usage or {}).get(key) or 0)
    return total
