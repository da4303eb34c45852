"""The judge: correctness, timing and the milestone reward, returned as a Verdict."""

from cuda_gym.judge.config import JudgeConfig
from cuda_gym.judge.judge import Judge
from cuda_gym.judge.verdict import (
    BuildResult,
    Flag,
    Verdict,
    ViolationKind,
    compute_reward,
    milestone_reward,
)

__all__ = [
    "BuildResult",
    "Flag",
    "Judge",
    "JudgeConfig",
    "Verdict",
    "ViolationKind",
    "compute_reward",
    "milestone_reward",
]
