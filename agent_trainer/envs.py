"""Where episode environments live: in this process, or in Ray actors on an evaluator GPU pool.

Both give an object with the Gym `reset`/`step`/`close` methods, made through `gymnasium.make`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agent_trainer.config import AgentConfig, make_kwargs


class FailedEnv:
    """Stands in for an env that could not be made; its `reset` raises the original error."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def reset(self, **_: Any):
        """Raise the error that prevented making the env."""
        raise RuntimeError(f"gym.make failed: {type(self.error).__name__}: {self.error}")

    def step(self, action: Any):
        """Never reached: reset fails first."""
        raise RuntimeError("the environment was never made")

    def close(self) -> None:
        """Nothing to release."""


class EnvHost:
    """Holds one env; the body of a Ray actor in the evaluator pool (plain class, testable)."""

    def __init__(self, env_id: str, env_kwargs: dict) -> None:
        self.env = gym.make(env_id, **env_kwargs)

    def reset(self, seed=None, options=None):
        """`env.reset`."""
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        """`env.step`."""
        return self.env.step(action)

    def close(self) -> None:
        """`env.close`."""
        self.env.close()


class EvaluatorError(RuntimeError):
    """The evaluator pool failed (infrastructure, not the agent).

    An env actor did not start or answer in time, or died. The episode ends with the env-error
    penalty; the error is logged and counted in the `infra_error` log.
    """


class RayEnv:
    """Gym-style proxy of an EnvHost Ray actor holding a share of an evaluator GPU.

    Its methods block (call them from a worker thread, as the runner does). The actor is
    scheduled outside every placement group: OpenRLHF creates its vLLM engines with
    `placement_group_capture_child_tasks=True`, so an actor made from inside an engine would
    otherwise be placed in the training group, whose GPUs are all taken, and never start. With
    the training GPUs held by that group, Ray places it on a GPU left outside, i.e. the
    evaluator pool. Every `ray.get` is bounded; a timeout or a dead actor raises EvaluatorError.

    Args:
        env_id: Gymnasium id made in the actor.
        env_kwargs: `gymnasium.make` keyword arguments.
        num_gpus: GPU share the actor holds.
        num_cpus: CPU share the actor holds (compilation runs there).
        start_timeout_s: Seconds for the actor to start, make the env and answer the first reset.
        step_timeout_s: Seconds for any later call (a step may judge the workspace).
    """

    def __init__(self, env_id: str, env_kwargs: dict, num_gpus: float, num_cpus: float = 1.0,
                 start_timeout_s: float = 600.0, step_timeout_s: float = 1800.0) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._ray = ray
        self.start_timeout_s = start_timeout_s
        self.step_timeout_s = step_timeout_s
        self._answered = False
        self._failed = False
        actor = ray.remote(EnvHost).options(
            num_gpus=num_gpus,
            num_cpus=num_cpus,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=None),
        )
        self.handle = actor.remote(env_id, env_kwargs)

    def reset(self, seed=None, options=None):
        """`env.reset` in the actor."""
        return self._get(self.handle.reset.remote(seed=seed, options=options), "reset")

    def step(self, action):
        """`env.step` in the actor."""
        return self._get(self.handle.step.remote(action), "step")

    def close(self) -> None:
        """Close the env (when the actor ever answered) and end the actor."""
        try:
            if self._answered and not self._failed:
                self._get(self.handle.close.remote(), "close")
        finally:
            self._ray.kill(self.handle)

    def _get(self, ref, what: str):
        from ray.exceptions import GetTimeoutError, RayActorError

        timeout_s = self.step_timeout_s if self._answered else self.start_timeout_s
        try:
            value = self._ray.get(ref, timeout=timeout_s)
        except GetTimeoutError:
            self._failed = True
            hint = "" if self._answered else "; no free evaluator GPU or CPU?"
            state = "answer" if self._answered else "start"
            raise EvaluatorError(f"env actor did not {state} within {timeout_s:g} s "
                                 f"({what}{hint})") from None
        except RayActorError as exc:
            self._failed = True
            raise EvaluatorError(f"env actor died during {what}: {exc}") from exc
        self._answered = True
        return value


def make_env(config: AgentConfig) -> Any:
    """An env for one episode as `config.evaluator` says; a FailedEnv when making it fails."""
    try:
        kwargs = make_kwargs(config.env_id, config.env_kwargs)
        if config.evaluator == "ray":
            return RayEnv(config.env_id, kwargs, config.evaluator_gpus_per_env,
                          config.evaluator_cpus_per_env, config.evaluator_start_timeout_s,
                          config.evaluator_step_timeout_s)
        return gym.make(config.env_id, **kwargs)
    except Exception as exc:  # reported as an env error of the episode, never raised
        return FailedEnv(exc)
