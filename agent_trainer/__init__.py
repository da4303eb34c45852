"""agent_trainer: train kernel-writing agents on CudaKernel-v0 with OpenRLHF, through the Gym API.

    python -m agent_trainer pipeline --config agent_trainer/recipes/one_gpu.yaml --dry-run

The episode runner (`run_token_episode`: token ids in and out, action spans and log-probs, for
RL trainers) is framework-free; cuda_gym's own `cuda_gym.agents.run_episode` plays a chat
agent (messages, no token ids) for benchmarks and chat endpoints. Trainer adapters are imported
only where their trainer is installed: `agent_trainer.openrlhf_agent` (OpenRLHF AgentExecutor),
`agent_trainer.verl_agent` (verl AgentLoopBase) and `agent_trainer.trl_env` (TRL GRPOTrainer
`environment_factory`).
"""

from agent_trainer.config import AgentConfig, RunnerConfig
from agent_trainer.episode import LOG_KEYS, Episode, Generation
from agent_trainer.runner import run_token_episode

__version__ = "0.1.0"

__all__ = ["LOG_KEYS", "AgentConfig", "Episode", "Generation", "RunnerConfig", "run_token_episode"]
