"""ThreadVectorEnv: N CudaKernelEnv episodes in one process, stepped together on a thread pool.

Registered as the `vector_entry_point` of CudaKernel-v0::

    envs = gym.make_vec("CudaKernel-v0", num_envs=8, vectorization_mode="vector_entry_point",
                        device="cpu")
    obs, infos = envs.reset(seed=0)            # obs: tuple of 8 str
    obs, rewards, terminated, truncated, infos = envs.step(actions)  # actions: 8 str/calls

A step of the vector env takes as long as its slowest sub-env (a judge call), but the sub-envs'
work overlaps: each runs in its own thread, and their judge calls share the process's judge
slots (runtime/slots.py). Text does not batch into arrays, so observations are tuples of str;
rewards, terminations and truncations are NumPy arrays; infos are stacked per key with a
`_key` mask, nested dicts recursively, as in Gymnasium's own vector envs.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from cuda_gym.env import CudaKernelEnv
from cuda_gym.errors import EnvStateError


class ThreadVectorEnv(gym.vector.VectorEnv):
    """`num_envs` CudaKernelEnv instances stepped concurrently on a thread pool.

    Args:
        num_envs: Number of sub-envs.
        autoreset_mode: `AutoresetMode.NEXT_STEP` (default: the step after an episode ends
            resets that sub-env and ignores its action), `SAME_STEP` (the ending step resets at
            once and reports `final_obs`/`final_info`) or `DISABLED` (reset with
            `options={"reset_mask": mask}`).
        max_workers: Threads stepping sub-envs (default: one per sub-env).
        render_mode: Passed to every sub-env.
        **env_kwargs: EnvConfig fields (or `config=`) for every sub-env.
    """

    def __init__(
        self,
        num_envs: int = 1,
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_workers: int | None = None,
        render_mode: str | None = None,
        **env_kwargs: Any,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if "max_episode_steps" in env_kwargs:
            raise ValueError(
                "CudaKernel-v0 counts turns itself: pass max_turns, not max_episode_steps"
            )
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.num_envs = num_envs
        self.envs: list[CudaKernelEnv] = []
        try:
            for _ in range(num_envs):
                self.envs.append(CudaKernelEnv(render_mode=render_mode, **env_kwargs))
        except BaseException:
            for env in self.envs:
                env.close()
            raise
        first = self.envs[0]
        self.render_mode = render_mode
        self.metadata = {**first.metadata, "autoreset_mode": self.autoreset_mode}
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = gym.spaces.Tuple([first.observation_space] * num_envs)
        self.action_space = gym.spaces.Tuple([first.action_space] * num_envs)
        self._pool = ThreadPoolExecutor(max_workers or num_envs, thread_name_prefix="cuda_gym_vec")
        self._autoreset = np.zeros(num_envs, dtype=np.bool_)

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        """Reset every sub-env (or those in `options["reset_mask"]`), concurrently.

        Args:
            seed: None, an int (sub-env i gets seed + i) or one seed per sub-env.
            options: Passed to every sub-env's reset (e.g. `{"task_id": ...}`), except
                `reset_mask`, a bool array of shape (num_envs,) choosing which sub-envs reset.
        """
        super().reset(seed=seed if isinstance(seed, int) else None)
        seeds = self._seeds(seed)
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if mask is None:
            mask = np.ones(self.num_envs, dtype=np.bool_)
        elif not (
            isinstance(mask, np.ndarray)
            and mask.dtype == np.bool_
            and mask.shape == (self.num_envs,)
        ):
            raise ValueError(
                f"options['reset_mask'] must be a bool array of shape ({self.num_envs},)"
            )
        picked = [i for i in range(self.num_envs) if mask[i]]
        results = self._map(
            lambda i: self.envs[i].reset(seed=seeds[i], options=options or None), picked
        )
        self._autoreset[picked] = False
        obs = [env.last_observation for env in self.envs]
        infos: list[dict | None] = [None] * self.num_envs
        for i, (ob, info) in zip(picked, results):
            obs[i], infos[i] = ob, info
        return tuple(obs), stack_infos(infos, self.num_envs)

    def step(
        self, actions: Sequence[Any]
    ) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env with its action, concurrently; see the class doc for autoreset."""
        if isinstance(actions, (str, dict)) or len(actions) != self.num_envs:
            raise ValueError(f"step() needs a sequence of {self.num_envs} actions, one per sub-env")
        if self.autoreset_mode == AutoresetMode.DISABLED and self._autoreset.any():
            ended = np.flatnonzero(self._autoreset).tolist()
            raise EnvStateError(
                f"Sub-envs {ended} have ended: reset them with options={{'reset_mask': mask}}"
            )
        results = self._map(lambda i: self._step_one(i, actions[i]), range(self.num_envs))
        obs = tuple(r[0] for r in results)
        rewards = np.array([r[1] for r in results], dtype=np.float64)
        terminated = np.array([r[2] for r in results], dtype=np.bool_)
        truncated = np.array([r[3] for r in results], dtype=np.bool_)
        infos = stack_infos([r[4] for r in results], self.num_envs)
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            self._autoreset[:] = False
        else:
            self._autoreset = terminated | truncated
        return obs, rewards, terminated, truncated, infos

    def render(self) -> tuple[str | None, ...]:
        """The rendering of every sub-env, in order."""
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        """Close every sub-env (deleting its workspace) and stop the threads."""
        self._pool.shutdown(wait=True)
        for env in self.envs:
            env.close()

    # -- internals ---------------------------------------------------------------------------

    def _step_one(self, i: int, action: Any) -> tuple[str, float, bool, bool, dict]:
        env = self.envs[i]
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset[i]:
            obs, info = env.reset()
            return obs, 0.0, False, False, info
        obs, reward, terminated, truncated, info = env.step(action)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and (terminated or truncated):
            final_obs, final_info = obs, info
            obs, info = env.reset()
            info = dict(info, final_obs=final_obs, final_info=final_info)
        return obs, reward, terminated, truncated, info

    def _map(self, fn, indices) -> list:
        # Every sub-env runs; the first error is raised once all have finished.
        futures = [self._pool.submit(fn, i) for i in indices]
        for future in futures:
            future.exception()
        return [future.result() for future in futures]

    def _seeds(self, seed) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, int):
            return [seed + i for i in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"Pass one seed per sub-env ({self.num_envs}), got {len(seeds)}")
        return seeds


def stack_infos(infos: Sequence[dict | None], num_envs: int) -> dict[str, Any]:
    """Stack per-env info dicts into one dict of arrays with `_key` masks.

    Values that are dicts in every env that has the key are stacked recursively; bools, ints
    and floats become typed arrays; anything else (str, list, None, mixed) an object array.
    """
    out: dict[str, Any] = {}
    keys = dict.fromkeys(k for info in infos if info for k in info)
    for key in keys:
        present = [i for i, info in enumerate(infos) if info and key in info]
        values = [infos[i][key] for i in present]
        if all(isinstance(v, dict) for v in values):
            out[key] = stack_infos(
                [infos[i][key] if i in present else None for i in range(num_envs)], num_envs
            )
        else:
            out[key] = _column(values, present, num_envs)
        mask = np.zeros(num_envs, dtype=np.bool_)
        mask[present] = True
        out[f"_{key}"] = mask
    return out


def _column(values: list, present: list[int], num_envs: int) -> np.ndarray:
    kinds = {type(v) for v in values}
    if kinds == {bool}:
        column = np.zeros(num_envs, dtype=np.bool_)
    elif kinds <= {int} and kinds:
        column = np.zeros(num_envs, dtype=np.int64)
    elif kinds <= {int, float} and kinds:
        column = np.zeros(num_envs, dtype=np.float64)
    else:
        column = np.full(num_envs, None, dtype=object)
    for i, value in zip(present, values):
        column[i] = value
    return column
