"""cuda_gym: a Gymnasium environment in which LLM agents write and optimise CUDA kernels.

Importing the package registers `CudaKernel-v0` (and `CudaKernelSingleTurn-v0`, one reply
judged once)::

    import gymnasium as gym
    import cuda_gym

    env = gym.make("CudaKernel-v0", device="auto")

`gym.make("cuda_gym:CudaKernel-v0")` imports the package itself (useful in fresh workers).
`gym.make_vec("CudaKernel-v0", num_envs=N, vectorization_mode="vector_entry_point")` gives a
ThreadVectorEnv: N episodes stepped concurrently on threads.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import gymnasium as gym

# The public names load on first use (PEP 562), so that `import cuda_gym` (and with it the
# `cuda-gym` command line) registers the envs without importing torch.
_LAZY = {
    "ParsedAction": "cuda_gym.actions",
    "ToolCall": "cuda_gym.actions",
    "parse_action": "cuda_gym.actions",
    "EnvConfig": "cuda_gym.config",
    "CudaKernelEnv": "cuda_gym.env",
    "Judge": "cuda_gym.judge",
    "JudgeConfig": "cuda_gym.judge",
    "Verdict": "cuda_gym.judge",
    "milestone_reward": "cuda_gym.judge",
    "Task": "cuda_gym.tasks",
    "builtin_task_ids": "cuda_gym.tasks",
    "load_task": "cuda_gym.tasks",
    "tool_schemas": "cuda_gym.tools",
}

if TYPE_CHECKING:
    from cuda_gym.actions import ParsedAction, ToolCall, parse_action
    from cuda_gym.config import EnvConfig
    from cuda_gym.env import CudaKernelEnv
    from cuda_gym.judge import Judge, JudgeConfig, Verdict, milestone_reward
    from cuda_gym.tasks import Task, builtin_task_ids, load_task
    from cuda_gym.tools import tool_schemas


def __getattr__(name: str):
    """Import a public name's module on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cuda_gym' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

ENV_ID = "CudaKernel-v0"
SINGLE_TURN_ENV_ID = "CudaKernelSingleTurn-v0"

if ENV_ID not in gym.registry:
    gym.register(
        id=ENV_ID,
        entry_point="cuda_gym.env:CudaKernelEnv",
        vector_entry_point="cuda_gym.vector:ThreadVectorEnv",
        nondeterministic=True,
    )
if SINGLE_TURN_ENV_ID not in gym.registry:
    gym.register(
        id=SINGLE_TURN_ENV_ID,
        entry_point="cuda_gym.single_turn:CudaKernelSingleTurnEnv",
        nondeterministic=True,
    )

__all__ = [
    "ENV_ID",
    "SINGLE_TURN_ENV_ID",
    "CudaKernelEnv",
    "EnvConfig",
    "Judge",
    "JudgeConfig",
    "ParsedAction",
    "Task",
    "ToolCall",
    "Verdict",
    "builtin_task_ids",
    "load_task",
    "milestone_reward",
    "parse_action",
    "tool_schemas",
]
