"""The judge: correctness, timing and the milestone reward, returned as a Verdict."""

from cuda_gym.judge.config import JudgeConfig
from cuda_gym.judge.judge import Judge
from cuda_gym.judge.verdict import BuildResult, Verdict, compute_reward, milestone_reward

__all__ = ["BuildResult", "Judge", "JudgeConfig", "Verdict", "compute_reward", "milestone_reward"]
