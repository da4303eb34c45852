"""The collect stage: run a policy through N episodes and save the trajectories as JSONL."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from agent_trainer.config import RunnerConfig
from agent_trainer.dataset import parse_label, rows_from_entries, task_splits
from agent_trainer.layout import actor_for, trajectories_path
from agent_trainer.runner import GenerateFn, run_token_episode

logger = logging.getLogger(__name__)


async def collect_episodes(make_env: Callable[[], Any], generate: GenerateFn, tokenizer: Any,
                           runner: RunnerConfig, labels: list[str], episodes: int,
                           out: Path, concurrency: int = 1) -> dict:
    """Play `episodes` episodes over `labels` (cycled), appending each to `out` as it ends.

    Returns:
        Summary: episodes, mean reward, successes (reward >= 1), env errors, and the mean
        generation and environment seconds per turn.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    slots = asyncio.Semaphore(concurrency)
    lock = asyncio.Lock()
    results = []
    start = time.monotonic()

    async def one(index: int) -> None:
        label = labels[index % len(labels)]
        async with slots:
            env = await asyncio.to_thread(make_env)
            try:
                options, seed = parse_label(label)
                episode = await run_token_episode(env, generate, tokenizer, runner, seed=seed,
                                            options=options)
            finally:
                await asyncio.to_thread(env.close)
        row = {"index": index, "label": label, **episode.to_json()}
        async with lock:
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            results.append(episode)
        logger.info("episode %d: reward %g, %d turns, %s", index, episode.reward,
                    len(episode.turns), episode.stop_reason)

    out.write_text("")
    await asyncio.gather(*(one(i) for i in range(episodes)))
    turns = [t for e in results for t in e.turns]
    return {
        "episodes": len(results),
        "out": str(out),
        "mean_reward": sum(e.reward for e in results) / max(len(results), 1),
        "successes": sum(e.reward >= 1 for e in results),
        "env_errors": sum(e.error is not None for e in results),
        "turns": len(turns),
        "generation_s_per_turn": sum(t.generation_s for t in turns) / max(len(turns), 1),
        "env_s_per_turn": sum(t.env_s for t in turns) / max(len(turns), 1),
        "wall_s": time.monotonic() - start,
    }


def make_policy(cfg) -> tuple[GenerateFn, Any]:
    """The configured policy's `generate` and tokenizer."""
    from transformers import AutoTokenizer

    collect = cfg.collect
    model_path = collect.model or actor_for(cfg, "collect")
    tokenizer = AutoTokenizer.from_pretrained(collect.tokenizer or model_path)
    if collect.policy == "openai":
        from agent_trainer.policies import OpenAIGenerate

        name = collect.api_model or model_path
        return OpenAIGenerate(collect.endpoint, name, tokenizer, collect.temperature), tokenizer
    import torch
    from transformers import AutoModelForCausalLM

    from agent_trainer.policies import HFGenerate

    device = collect.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    return HFGenerate(model, tokenizer, collect.temperature, device), tokenizer


def run_collect(cfg) -> dict:
    """The collect stage of a pipeline config; returns the summary (also written as JSON)."""
    generate, tokenizer = make_policy(cfg)
    t = cfg.tasks
    splits = task_splits(list(t.sources), list(t.validation_sources), t.validation_fraction,
                         list(t.eval_sources), list(t.include) if t.include else None, t.seed)
    rows = rows_from_entries(splits.train, 1, t.seed)
    agent = cfg.agent
    out = trajectories_path(cfg)
    summary = asyncio.run(collect_episodes(
        lambda: gym.make(agent.env_id, **agent.env_kwargs), generate, tokenizer, agent.runner,
        [r["label"] for r in rows], cfg.collect.episodes, out, cfg.collect.concurrency))
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=2))
    return summary
