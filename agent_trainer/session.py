"""The environment side of one episode: reset, steps, rewards, the budget's submit, the reward.

Shared by the token-level runner (runner.py: OpenRLHF, verl, collect) and the TRL environment
(trl_env.py), so every trainer sees the same rewards, stop reasons and env-error penalty. An
exception from the env never escapes: it becomes the episode's `error`, and the reward becomes
`RunnerConfig.env_error_penalty`. Methods block; async callers run them in a worker thread.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from agent_trainer.chat import system_text
from agent_trainer.config import RunnerConfig
from agent_trainer.envs import EvaluatorError

logger = logging.getLogger(__name__)

SUBMIT_ACTION = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
"""What is sent when a trainer-side budget ends the episode and `judge_on_budget` is set."""

RESET_FAILED = "The environment failed to start; no task is available."
"""The first observation of an episode whose reset raised."""


@dataclass
class StepResult:
    """One `env.step` as the session recorded it (empty observation when the env raised)."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)
    env_s: float = 0.0


class EnvSession:
    """Plays the env side of one episode; never raises for env failures.

    Attributes:
        rewards: Reward of each successful step (plus the budget's submit, when judged).
        info: The env's last `info`.
        task_id: The task played, when reset reported it.
        error: "reset: ..." or "step: ..." once the env raised; the episode is then over.
        infra_error: That error came from the evaluator pool (EvaluatorError), not the env.
        terminated: The env terminated (the agent submitted).
        truncated: The env truncated (its own turn, time or invalid-action budget).
        stop_reason: The env's stop reason ("submit", "max_turns", ...), or "" while running.
        budget_spent: A trainer-side budget ended the episode (`submit_on_budget`).
        steps: Steps taken, the budget's submit excluded.
        env_s: Seconds spent in `env.reset` and `env.step`.
    """

    def __init__(self, env: Any, config: RunnerConfig) -> None:
        self.env = env
        self.config = config
        self.rewards: list[float] = []
        self.info: dict[str, Any] = {}
        self.task_id: str | None = None
        self.error: str | None = None
        self.infra_error = False
        self.terminated = False
        self.truncated = False
        self.stop_reason = ""
        self.budget_spent = False
        self.steps = 0
        self.env_s = 0.0

    @property
    def ended(self) -> bool:
        """The env or a trainer-side budget ended the episode, or the env raised."""
        return self.terminated or self.truncated or self.budget_spent or self.error is not None

    @property
    def reward(self) -> float:
        """The episode's reward: the sum of `rewards`, or the penalty after an env error."""
        if self.error is not None:
            return float(self.config.env_error_penalty)
        return float(sum(self.rewards))

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[str, str]:
        """Reset the env; return the first observation and the system text (tools included)."""
        start = time.monotonic()
        try:
            obs, info = self.env.reset(seed=seed, options=options)
            self.task_id = info.get("task_id")
            system = system_text(self.config.system_prompt, info.get("tools"))
        except Exception as exc:  # the env failed: the episode ends with a penalty
            self._record_error("reset", exc)
            obs, system = RESET_FAILED, self.config.system_prompt
        self.env_s += time.monotonic() - start
        return obs, system

    def step(self, action: Any) -> StepResult:
        """One env step with `action`; records its reward, info and how the episode ended."""
        result = self._step(action)
        if self.error is None:
            self.steps += 1
            self.rewards.append(result.reward)
            self.info = result.info
            if result.terminated or result.truncated:
                self.terminated = bool(result.terminated)
                self.truncated = bool(result.truncated)
                self.stop_reason = result.info.get("stop_reason") or (
                    "submit" if result.terminated else "max_turns"
                )
        return result

    def submit_on_budget(self) -> None:
        """A trainer-side budget ended the episode: judge the workspace if `judge_on_budget`.

        The judged reward is added to `rewards`; `terminated` and `stop_reason` are left to the
        caller, since the agent did not submit.
        """
        if self.ended:
            return
        self.budget_spent = True
        if not self.config.judge_on_budget:
            return
        result = self._step(SUBMIT_ACTION)
        if self.error is None:
            self.rewards.append(result.reward)
            self.info = result.info

    def _step(self, action: Any) -> StepResult:
        start = time.monotonic()
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
            result = StepResult(obs, float(reward), bool(terminated), bool(truncated), info)
        except Exception as exc:  # the env failed: the episode ends with a penalty
            self._record_error("step", exc)
            result = StepResult("", 0.0, False, False, {})
        result.env_s = time.monotonic() - start
        self.env_s += result.env_s
        return result

    def _record_error(self, call: str, exc: Exception) -> None:
        self.error = f"{call}: {type(exc).__name__}: {exc}"
        if isinstance(exc, EvaluatorError):
            self.infra_error = True
            logger.error("infrastructure error in env.%s (evaluator pool, not the agent): %s",
                         call, exc)
        else:
            logger.warning("env.%s failed: %s", call, exc, exc_info=True)
