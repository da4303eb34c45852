"""One labelled episode for a trainer adapter: make the env, run the runner, close, record, score.

The OpenRLHF executor (openrlhf_agent.py) and the verl agent loop (verl_agent.py) both play a
dataset row's label through `play_label`, so they share the env lifecycle, the reward clip, the
0/1 success score and the trajectory log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

from agent_trainer.chat import ChatTokenizer
from agent_trainer.config import AgentConfig, RunnerConfig
from agent_trainer.dataset import parse_label
from agent_trainer.envs import make_env
from agent_trainer.episode import Episode
from agent_trainer.runner import GenerateFn, run_token_episode

logger = logging.getLogger(__name__)


class LabelErrorEnv:
    """An env whose reset reports a bad dataset label (so it becomes an env-error episode)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def reset(self, **_: Any):
        """Raise the label's error."""
        raise self.error

    def step(self, action: Any):
        """Never reached: reset fails first."""
        raise self.error

    def close(self) -> None:
        """Nothing to release."""


async def play_label(
    config: AgentConfig,
    label: Any,
    generate: GenerateFn,
    tokenizer: ChatTokenizer,
    runner: RunnerConfig | None = None,
) -> Episode:
    """Play the task a dataset label names; env and label failures end in the penalty.

    Args:
        config: The run's agent configuration (env, budgets, trajectory log).
        label: JSON text or dict naming the task (see `dataset.parse_label`).
        generate: The policy, token ids in and out.
        tokenizer: The policy's tokenizer (with its chat template).
        runner: Budgets for this episode; defaults to `config.runner`.
    """
    try:
        options, seed = parse_label(label)
        env = await asyncio.to_thread(make_env, config)
    except (ValueError, TypeError) as exc:
        options, seed, env = None, None, LabelErrorEnv(exc)
    try:
        episode = await run_token_episode(
            env, generate, tokenizer, runner or config.runner, seed=seed, options=options
        )
    finally:
        await asyncio.to_thread(close_env, env)
    record_episode(config.trajectory_dir, label, episode)
    return episode


async def ensure_action(episode: Episode, generate: GenerateFn) -> Episode:
    """Give an episode that failed before its first turn one real action token.

    Trainers form a sample from the policy's tokens; with none, the penalty would train
    nothing. The token is sampled after the prompt and carries the episode's penalty.
    """
    if episode.action_ranges:
        return episode
    gen = await generate(list(episode.token_ids), 1, [])
    start = len(episode.token_ids)
    episode.token_ids = episode.token_ids + gen.token_ids
    episode.action_ranges = [(start, len(episode.token_ids))]
    if gen.logprobs is None:
        episode.rollout_log_probs = None
    elif episode.rollout_log_probs is not None:
        episode.rollout_log_probs = episode.rollout_log_probs + gen.logprobs
    return episode


def clipped_reward(reward: float, config: AgentConfig) -> float:
    """An episode's reward clipped to `config.reward_clip` (the trainer's clip range)."""
    low, high = config.reward_clip
    return min(max(float(reward), low), high)


def success_score(episode: Episode, config: AgentConfig) -> float:
    """1.0 when the episode ran without env error and reached `config.success_reward`, else 0."""
    return 1.0 if episode.error is None and episode.reward >= config.success_reward else 0.0


def record_episode(directory: str | None, label: Any, episode: Episode) -> None:
    """Append the episode as one JSON line to `episodes-<pid>.jsonl` in `directory`, if set."""
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"episodes-{os.getpid()}.jsonl")
    with open(path, "a") as f:
        f.write(json.dumps({"label": label, **episode.to_json()}) + "\n")


def close_env(env: Any) -> None:
    """Close `env`; a failure is logged, since it must not fail a finished episode."""
    try:
        env.close()
    except Exception as exc:  # closing must not turn a finished episode into a failure
        logger.warning("env.close failed: %s", exc)
