"""OpenRLHF integration: an AgentExecutor (0.11.x contract) that plays episodes with the runner.

OpenRLHF loads the run's generated agent_func.py (see agent_func.py) in every vLLM engine
actor and calls, per sample,
`await executor.execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine,
images=None)`. The returned dict carries the full token sequence, the model's action spans,
rollout log-probs, one terminal reward (clipped to the run's clip range), a 0/1 score for
dynamic filtering, `truncated`, and logs whose keys never vary (OpenRLHF concatenates them).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from typing import Any

from openrlhf.utils.agent import AgentExecutorBase

from agent_trainer.config import AgentConfig
from agent_trainer.episode import Episode, Generation
from agent_trainer.play import clipped_reward, ensure_action, play_label, success_score

logger = logging.getLogger(__name__)


def engine_generate(llm_engine: Any, sampling_params: Any):
    """A runner `generate` over OpenRLHF's vLLM engine actor (token ids in, token ids out)."""

    async def generate(token_ids: list[int], max_tokens: int, stop: list[str]) -> Generation:
        params = copy.deepcopy(sampling_params)  # shared by the n samples of a prompt
        params.max_tokens = max_tokens
        if stop:
            # vLLM truncates the final text at a stop string however `stop` was set; only
            # its streaming hold-back buffer is sized at construction (we do not stream).
            params.stop = list(getattr(params, "stop", None) or []) + list(stop)
        output = (await llm_engine.generate(token_ids, params)).outputs[0]
        ids = list(output.token_ids)
        logprobs = None
        if getattr(params, "logprobs", None) is not None and output.logprobs is not None:
            logprobs = [step[tok].logprob for tok, step in zip(ids, output.logprobs)]
        return Generation(ids, output.text, logprobs, output.finish_reason or "stop")

    return generate


class CudaGymAgentExecutor(AgentExecutorBase):
    """Plays one Gym episode per `execute` call; at most `max_concurrent_episodes` at once."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self._slots: asyncio.Semaphore | None = None

    @property
    def slots(self) -> asyncio.Semaphore:
        """Bounds the episodes running at once on this engine."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.config.max_concurrent_episodes)
        return self._slots

    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer,
                      llm_engine, images=None, **kwargs) -> dict:
        """Play an episode of the task in `label`; return OpenRLHF's sample dict."""
        generate = engine_generate(llm_engine, sampling_params)
        async with self.slots:
            episode = await self.play(label, generate, hf_tokenizer, max_length)
        # OpenRLHF needs at least one action token to form a sample.
        episode = await ensure_action(episode, generate)
        return to_openrlhf(prompt, label, episode, self.config, images)

    async def play(self, label: Any, generate, tokenizer, max_length: int) -> Episode:
        """Make the env, play the episode, close the env; env failures end in a penalty."""
        runner = self.config.runner
        if max_length and max_length < runner.max_length:
            runner = dataclasses.replace(runner, max_length=max_length)
        return await play_label(self.config, label, generate, tokenizer, runner)


def to_openrlhf(prompt: Any, label: Any, episode: Episode, config: AgentConfig,
                images: Any = None) -> dict:
    """The dict OpenRLHF 0.11.x reads from `execute` (samples_generator)."""
    return {
        "prompt": prompt,
        "label": label,
        "images": images,
        "mm_train_inputs": None,
        "observation_tokens": list(episode.token_ids),
        "action_ranges": [tuple(r) for r in episode.action_ranges],
        "rollout_log_probs": episode.rollout_log_probs,
        "reward": clipped_reward(episode.reward, config),
        "scores": success_score(episode, config),
        "extra_logs": dict(episode.logs),
        "truncated": bool(episode.truncated),
    }

