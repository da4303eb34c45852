"""Where episode environments live: in this process, or in Ray actors on an evaluator GPU pool.

Both give an object with the Gym `reset`/`step`/`close` methods, made through `gymnasium.make`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agent_trainer.config import AgentConfig


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


class RayEnv:
    """Gym-style proxy of an EnvHost Ray actor holding a share of an evaluator GPU.

    Its methods block (call them from a worker thread, as the runner does). The actor requests
    `num_gpus` GPU; with the training GPUs held by OpenRLHF's placement group, Ray places it on
    a GPU left outside that group, i.e. the evaluator pool.
    """

    def __init__(self, env_id: str, env_kwargs: dict, num_gpus: float) -> None:
        import ray

        self._ray = ray
        actor = ray.remote(num_gpus=num_gpus, num_cpus=1)(EnvHost)
        self.handle = actor.remote(env_id, env_kwargs)

    def reset(self, seed=None, options=None):
        """`env.reset` in the actor."""
        return self._ray.get(self.handle.reset.remote(seed=seed, options=options))

    def step(self, action):
        """`env.step` in the actor."""
        return self._ray.get(self.handle.step.remote(action))

    def close(self) -> None:
        """Close the env and end the actor."""
        try:
            self._ray.get(self.handle.close.remote())
        finally:
            self._ray.kill(self.handle)


def make_env(config: AgentConfig) -> Any:
    """An env for one episode as `config.evaluator` says; a FailedEnv when making it fails."""
    try:
        if config.evaluator == "ray":
            return RayEnv(config.env_id, dict(config.env_kwargs), config.evaluator_gpus_per_env)
        return gym.make(config.env_id, **config.env_kwargs)
    except Exception as exc:  # reported as an env error of the episode, never raised
        return FailedEnv(exc)
