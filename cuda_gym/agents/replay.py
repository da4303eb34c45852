"""The replay agent: plays the actions of a saved trajectory again."""

from __future__ import annotations

from pathlib import Path

from cuda_gym.agents.base import Agent, AgentError, AgentReply
from cuda_gym.agents.trajectory import read_trajectory


class ReplayAgent(Agent):
    """Replays the actions recorded in a trajectory JSONL file, in order.

    The env judges the replayed actions afresh, so a replay re-measures a saved episode (for
    example on another GPU) without calling the model again. Token usage is not re-counted.

    Args:
        path: A trajectory written by `run_episode`.

    Raises:
        TrajectoryError: The file is missing or malformed.
    """

    name = "replay"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        records = read_trajectory(self.path)
        self.steps = [r for r in records if r.get("type") == "step"]
        self.task_id = records[0].get("info", {}).get("task_id")
        self._next = 0

    def reset(self, observation: str, info: dict) -> None:
        """Start from the first recorded step, after checking that the task is the recorded one."""
        if self.task_id and info.get("task_id") and info["task_id"] != self.task_id:
            raise AgentError(
                f"trajectory {self.path} was recorded on task {self.task_id!r}, "
                f"not {info['task_id']!r}"
            )
        self._next = 0

    def act(self) -> AgentReply:
        """The next recorded action.

        Raises:
            AgentError: The trajectory has no more steps while the episode goes on.
        """
        if self._next >= len(self.steps):
            raise AgentError(
                f"trajectory {self.path} has only {len(self.steps)} steps; the episode goes on"
            )
        step = self.steps[self._next]
        self._next += 1
        return AgentReply(action=step["action"], message=step.get("message") or {}, usage={})

    def describe(self) -> dict:
        """Name, source file and number of recorded steps."""
        return {"agent": self.name, "trajectory": str(self.path), "steps": len(self.steps)}
