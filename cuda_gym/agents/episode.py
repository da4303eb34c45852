"""Play one episode of an agent in an env, recording the trajectory."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuda_gym.agents.base import Agent, AgentError, add_usage
from cuda_gym.agents.trajectory import TrajectoryWriter, step_info_record

logger = logging.getLogger(__name__)


@dataclass
class EpisodeResult:
    """What an episode produced.

    Attributes:
        reward: The last step's reward (the judged one).
        turns: Steps taken.
        stop_reason: The env's stop reason, or "agent_error" when the agent failed.
        final: The final verdict (submission or truncation), as a dict, or None.
        best: The best judged state of the episode (`env.unwrapped.best`, files included).
        usage: Tokens spent in the episode: prompt_tokens, completion_tokens, total_tokens.
        wall_s: Wall-clock seconds of the episode.
        agent_s: Seconds spent waiting for the agent.
        error: The agent's error message when it failed, else None.
        task_id: The episode's task.
    """

    reward: float = 0.0
    turns: int = 0
    stop_reason: str | None = None
    final: dict | None = None
    best: dict | None = None
    usage: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    agent_s: float = 0.0
    error: str | None = None
    task_id: str = ""

    def summary(self) -> dict:
        """A JSON-ready summary (without the best state's files or the full verdict)."""
        return {
            "task_id": self.task_id,
            "reward": self.reward,
            "turns": self.turns,
            "stop_reason": self.stop_reason,
            "usage": dict(self.usage),
            "wall_s": round(self.wall_s, 3),
            "agent_s": round(self.agent_s, 3),
            "error": self.error,
            "best": None
            if self.best is None
            else {k: v for k, v in self.best.items() if k != "files"},
        }


def run_episode(
    env: Any,
    agent: Agent,
    *,
    seed: int | None = None,
    options: dict | None = None,
    trajectory_path: str | Path | None = None,
) -> EpisodeResult:
    """Play one episode to its end: reset, then act/step/observe until terminated or truncated.

    Args:
        env: A CudaKernel-v0 env (from `gym.make` or the class).
        agent: The agent.
        seed: Seed for `env.reset`.
        options: Options for `env.reset` (e.g. `{"task_id": ...}`).
        trajectory_path: Where to write the JSONL trajectory (None: not written).

    Returns:
        The EpisodeResult. An AgentError ends the episode early with stop_reason
        "agent_error" (recorded, not raised); env errors propagate.
    """
    start = time.monotonic()
    writer = TrajectoryWriter(trajectory_path) if trajectory_path is not None else None
    result = EpisodeResult()
    try:
        obs, info = env.reset(seed=seed, options=options)
        result.task_id = info.get("task_id", "")
        if writer:
            writer.write(
                {"type": "reset", "observation": obs, "info": info, "agent": agent.describe()}
            )
        agent.reset(obs, info)
        done = False
        while not done:
            try:
                reply = agent.act()
            except AgentError as exc:
                result.stop_reason = "agent_error"
                result.error = str(exc)
                logger.warning("agent failed on %s: %s", result.task_id, exc)
                break
            result.agent_s += reply.latency_s
            add_usage(result.usage, reply.usage)
            obs, reward, terminated, truncated, info = env.step(reply.action)
            result.turns = info.get("turn", result.turns + 1)
            result.reward = float(reward)
            result.stop_reason = info.get("stop_reason")
            if "verdict" in info:
                result.final = info["verdict"]
            done = terminated or truncated
            if writer:
                writer.write(
                    {
                        "type": "step",
                        "turn": result.turns,
                        "message": reply.message,
                        "action": reply.action,
                        "usage": reply.usage,
                        "latency_s": round(reply.latency_s, 4),
                        "attempts": reply.attempts,
                        "observation": obs,
                        "tool_messages": info.get("messages", []),
                        "reward": float(reward),
                        "terminated": terminated,
                        "truncated": truncated,
                        "info": step_info_record(info),
                    }
                )
            if not done:
                agent.observe(obs, info)
        best = getattr(getattr(env, "unwrapped", env), "best", None)
        result.best = None if best is None else dict(best)
    finally:
        result.wall_s = time.monotonic() - start
        if writer:
            # The whole conversation as the model saw it (system prompt included), when the
            # agent keeps one: ready for fine-tuning datasets.
            conversation = getattr(agent, "messages", None)
            writer.write({"type": "end", **result.summary(), "messages": conversation})
            writer.close()
    return result
