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

import gymnasium as gym

from cuda_gym.actions import ParsedAction, ToolCall, parse_action
from cuda_gym.config import EnvConfig
from cuda_gym.env import CudaKernelEnv
from cuda_gym.judge import Judge, JudgeConfig, Verdict, milestone_reward
from cuda_gym.tasks import Task, builtin_task_ids, load_task
from cuda_gym.tools import tool_schemas

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
