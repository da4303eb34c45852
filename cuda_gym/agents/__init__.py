"""Agents that play CudaKernel-v0: an OpenAI-compatible chat agent, scripted and replay agents.

`run_episode(env, agent, trajectory_path=...)` plays one episode and writes its JSONL
trajectory (messages, tool calls, observations, per-step results).
"""

from cuda_gym.agents.base import Agent, AgentError, AgentReply
from cuda_gym.agents.episode import EpisodeResult, run_episode
from cuda_gym.agents.openai_chat import ChatAgentConfig, OpenAIChatAgent
from cuda_gym.agents.replay import ReplayAgent
from cuda_gym.agents.scripted import ScriptedAgent
from cuda_gym.agents.trajectory import TrajectoryError, TrajectoryWriter, read_trajectory

__all__ = [
    "Agent",
    "AgentError",
    "AgentReply",
    "ChatAgentConfig",
    "EpisodeResult",
    "OpenAIChatAgent",
    "ReplayAgent",
    "ScriptedAgent",
    "TrajectoryError",
    "TrajectoryWriter",
    "read_trajectory",
    "run_episode",
]
