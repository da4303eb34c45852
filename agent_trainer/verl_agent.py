r"""verl integration: an agent loop (verl 0.9 `AgentLoopBase`) that plays episodes with the runner.

Write the run's files, then point verl at them:

    write_agent_loop_config(RUN, agent_config)        # RUN/agent_config.json, RUN/agent_loop.yaml
    write_verl_dataset(dataset_rows(...), RUN / "train.parquet")    # rows with agent_name cuda_gym
    python -m verl.trainer.main_ppo data.train_files=RUN/train.parquet \
        actor_rollout_ref.rollout.agent.agent_loop_config_path=RUN/agent_loop.yaml ...

verl's AgentLoopWorker builds one loop per sample and awaits `run(sampling_params, **row)`; the
row's `label` names the task. The returned AgentLoopOutput splits the runner's sequence after the
first prompt: `response_mask` is 1 exactly on the model's action spans (those the OpenRLHF
executor trains on) and 0 on environment feedback, `reward_score` is the clipped episode reward
(verl puts it on the last response token), and the fixed-key episode logs ride in
`extra_fields["reward_extra_info"]`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import weakref
from pathlib import Path
from typing import Any
from uuid import uuid4

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
except ImportError as exc:  # say what to install instead of a bare ModuleNotFoundError
    raise ImportError(
        "agent_trainer.verl_agent needs verl's agent loop (verl.experimental.agent_loop). "
        "Install verl 0.9.x (pip install verl==0.9.1; on a CPU-only machine: pip install "
        "--no-deps verl==0.9.1 hydra-core codetiming cachetools fastapi uvicorn, and "
        "tensordict==0.10.0 --no-deps with pyvers orjson). Error: " + str(exc)
    ) from exc

from agent_trainer.agent_func import load_agent_config, write_agent_config
from agent_trainer.chat import ChatTokenizer
from agent_trainer.config import AgentConfig
from agent_trainer.episode import Episode, Generation
from agent_trainer.play import clipped_reward, ensure_action, play_label, success_score
from agent_trainer.runner import GenerateFn

logger = logging.getLogger(__name__)

AGENT_NAME = "cuda_gym"
"""The `agent_name` that dataset rows give to be played by CudaGymAgentLoop."""

_SLOTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def server_generate(
    server_manager: Any,
    sampling_params: dict[str, Any],
    tokenizer: ChatTokenizer,
    request_id: str,
    priority: int = 0,
) -> GenerateFn:
    """A runner `generate` over verl's LLM server client (token ids in, token ids out).

    verl's `TokenOutput` has no text: the text the env sees is the decoded ids (special tokens
    skipped). One `request_id` per episode keeps its turns on one server (prefix cache).
    """
    eos = getattr(tokenizer, "eos_token_id", None)

    async def generate(token_ids: list[int], max_tokens: int, stop: list[str]) -> Generation:
        params = dict(sampling_params)  # verl reuses the dict for every sample
        params["max_tokens"] = max_tokens
        if stop:
            params["stop"] = list(params.get("stop") or []) + list(stop)
        output = await server_manager.generate(
            request_id=request_id,
            prompt_ids=list(token_ids),
            sampling_params=params,
            priority=priority,
        )
        ids = [int(t) for t in output.token_ids]
        logprobs = None
        if sampling_params.get("logprobs") and output.log_probs is not None:
            logprobs = list(output.log_probs)
        stopped = bool(ids) and ids[-1] == eos
        reason = "length" if len(ids) >= max_tokens and not stopped else "stop"
        text = tokenizer.decode(ids, skip_special_tokens=True)
        return Generation(ids, text, logprobs, reason)

    return generate


def to_agent_loop_output(episode: Episode, config: AgentConfig) -> AgentLoopOutput:
    """The AgentLoopOutput (verl) of an episode: prompt, response, action mask, reward, logs."""
    start = episode.prompt_length
    ids = list(episode.token_ids)
    mask = [0] * (len(ids) - start)
    for begin, end in episode.action_ranges:
        mask[begin - start : end - start] = [1] * (end - begin)
    logprobs = episode.rollout_log_probs
    return AgentLoopOutput(
        prompt_ids=ids[:start],
        response_ids=ids[start:],
        response_mask=mask,
        response_logprobs=None if logprobs is None else list(logprobs[start:]),
        reward_score=clipped_reward(episode.reward, config),
        num_turns=len(episode.messages) - 1,  # user, assistant and feedback messages
        metrics={
            "generate_sequences": episode.logs.get("generation_s", 0.0),
            "tool_calls": episode.logs.get("env_s", 0.0),
        },
        extra_fields={
            "turn_scores": list(episode.turn_rewards),
            "tool_rewards": [],
            "reward_extra_info": {**episode.logs, "success": success_score(episode, config)},
        },
    )


@register(AGENT_NAME)
class CudaGymAgentLoop(AgentLoopBase):
    """Plays one Gym episode per `run`; at most `max_concurrent_episodes` at once per worker.

    Args:
        *args: verl's AgentLoopBase arguments (trainer config, server manager, tokenizer, ...).
        agent_config_path: The run's agent_config.json (written by write_agent_loop_config);
            None plays with AgentConfig() (the loop as `register` alone makes it).
        agent_config_sha256: The file's SHA-256 when written; an edited file is refused.
        **kwargs: Passed on to AgentLoopBase (verl adds `tools`, the YAML adds `name`).
    """

    def __init__(
        self,
        *args: Any,
        agent_config_path: str | None = None,
        agent_config_sha256: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.agent_config = (
            _load_config(str(agent_config_path), agent_config_sha256)
            if agent_config_path
            else AgentConfig()
        )
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play the episode the row's `label` names (also read from `extra_info["label"]`)."""
        label = kwargs.get("label")
        if label is None:
            label = (kwargs.get("extra_info") or {}).get("label")
        runner = self.agent_config.runner
        limit = self.response_length
        if runner.max_response_length is not None:
            limit = min(limit, runner.max_response_length)
        runner = dataclasses.replace(runner, max_response_length=limit)
        generate = _check_prompt(
            server_generate(
                self.server_manager,
                sampling_params,
                self.tokenizer,
                uuid4().hex,
                int(kwargs.get("priority", 0)),
            ),
            self.prompt_length,
        )
        async with _episode_slots(self.agent_config.max_concurrent_episodes):
            episode = await play_label(self.agent_config, label, generate, self.tokenizer, runner)
        # An episode that failed before its first turn still trains one token on its penalty.
        episode = await ensure_action(episode, generate)
        return to_agent_loop_output(episode, self.agent_config)


def write_agent_loop_config(
    run_dir: str | Path, config: AgentConfig, name: str = AGENT_NAME
) -> Path:
    """Write agent_config.json and the agent-loop YAML verl reads; return the YAML's path.

    Pass the path as `actor_rollout_ref.rollout.agent.agent_loop_config_path`; rows whose
    `agent_name` is `name` are then played by CudaGymAgentLoop with this config.
    """
    import yaml

    config_path, sha = write_agent_config(run_dir, config)
    entry = {
        "name": name,
        "_target_": f"{CudaGymAgentLoop.__module__}.{CudaGymAgentLoop.__qualname__}",
        "agent_config_path": str(config_path),
        "agent_config_sha256": sha,
    }
    path = config_path.parent / "agent_loop.yaml"
    path.write_text(yaml.safe_dump([entry], sort_keys=False))
    return path


def verl_rows(rows: list[dict], agent_name: str = AGENT_NAME) -> list[dict]:
    """Dataset rows for verl (chat `prompt`, `agent_name`, `label`) from `dataset_rows` rows."""
    return [
        {
            "data_source": "cuda_gym",
            "prompt": [{"role": "user", "content": row["prompt"]}],
            "agent_name": agent_name,
            "label": row["label"],
            "extra_info": {"index": index, "label": row["label"]},
        }
        for index, row in enumerate(rows)
    ]


def write_verl_dataset(rows: list[dict], path: str | Path, agent_name: str = AGENT_NAME) -> Path:
    """Write `verl_rows(rows)` as the Parquet file verl's `data.train_files` reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(verl_rows(rows, agent_name)), path)
    return path


@functools.lru_cache(maxsize=8)
def _load_config(path: str, sha256: str | None) -> AgentConfig:
    # verl builds a loop per sample: read and check the file once per worker.
    return load_agent_config(path, sha256)


def _check_prompt(generate: GenerateFn, prompt_length: int) -> GenerateFn:
    """`generate` that refuses a first prompt longer than verl's prompt_length."""
    first = True

    async def checked(token_ids: list[int], max_tokens: int, stop: list[str]) -> Generation:
        nonlocal first
        if first and len(token_ids) > prompt_length:
            raise ValueError(
                f"The episode's first prompt has {len(token_ids)} tokens (system prompt, tool "
                f"schemas and task statement) but verl's rollout.prompt_length is "
                f"{prompt_length}; raise data.max_prompt_length to at least {len(token_ids)}."
            )
        first = False
        return await generate(token_ids, max_tokens, stop)

    return checked


def _episode_slots(limit: int) -> asyncio.Semaphore:
    """The semaphore bounding this worker's concurrent episodes (one per event loop)."""
    loop = asyncio.get_running_loop()
    slots = _SLOTS.get(loop)
    if slots is None:
        slots = _SLOTS[loop] = asyncio.Semaphore(limit)
    return slots
