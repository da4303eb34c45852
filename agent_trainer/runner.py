"""The episode runner: plays one Gym episode with a token-in/token-out model, no trainer needed.

    episode = await run_episode(env, generate, tokenizer, RunnerConfig(max_turns=20))

`generate(token_ids, max_tokens, stop)` is any coroutine returning a `Generation`; adapters for
vLLM engines (OpenRLHF), Hugging Face models and OpenAI-compatible servers live beside it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agent_trainer.chat import ChatFormat, ChatTokenizer, system_text
from agent_trainer.config import RunnerConfig
from agent_trainer.episode import LOG_KEYS, Episode, Generation, Turn

logger = logging.getLogger(__name__)

GenerateFn = Callable[[list[int], int, list[str]], Awaitable[Generation]]

SUBMIT_ACTION = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
"""What the runner sends when its own budget ends the episode and `judge_on_budget` is set."""


class _State:
    """Mutable bookkeeping of one episode."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.logprobs: list[float] | None = []
        self.ranges: list[tuple[int, int]] = []
        self.messages: list[dict] = []
        self.turns: list[Turn] = []
        self.rewards: list[float] = []
        self.done = False
        self.truncated = False
        self.stop_reason = ""
        self.error: str | None = None
        self.info: dict[str, Any] = {}
        self.task_id: str | None = None
        self.generation_s = 0.0
        self.env_s = 0.0


async def run_episode(
    env: Any,
    generate: GenerateFn,
    tokenizer: ChatTokenizer,
    config: RunnerConfig | None = None,
    *,
    seed: int | None = None,
    options: dict | None = None,
) -> Episode:
    """Play one episode of `env` and return its Episode; never raises for env failures.

    Args:
        env: A Gymnasium env with text actions and observations (e.g. CudaKernel-v0). The
            caller owns it (and closes it).
        generate: Coroutine `(token_ids, max_tokens, stop) -> Generation`.
        tokenizer: Tokenizer with a chat template (`apply_chat_template`, `encode`, `decode`).
        config: Budgets and prompt; defaults to RunnerConfig().
        seed: Passed to `env.reset`.
        options: Passed to `env.reset` (e.g. `{"task_id": ...}`).
    """
    config = config or RunnerConfig()
    chat = ChatFormat(tokenizer, config.feedback_role)
    st = _State()
    start = time.monotonic()
    try:
        obs, info = await asyncio.to_thread(env.reset, seed=seed, options=options)
        st.task_id = info.get("task_id")
        system = system_text(config.system_prompt, info.get("tools"))
    except Exception as exc:  # the env failed: the episode ends with a penalty
        logger.warning("env.reset failed: %s", exc, exc_info=True)
        st.error = f"reset: {type(exc).__name__}: {exc}"
        obs = "The environment failed to start; no task is available."
        system = config.system_prompt
    st.env_s += time.monotonic() - start
    st.messages = [{"role": "system", "content": system}, {"role": "user", "content": obs}]
    st.ids = _encode(tokenizer, chat.prompt(st.messages))
    prompt_length = len(st.ids)
    st.logprobs = [0.0] * prompt_length

    if st.error is None:
        await _play(env, generate, tokenizer, chat, config, st)
    if st.error is not None:
        st.stop_reason = "env_error"
        st.done = False
        st.truncated = False
        reward = float(config.env_error_penalty)
    else:
        reward = float(sum(st.rewards))
    return Episode(
        token_ids=st.ids,
        prompt_length=prompt_length,
        action_ranges=st.ranges,
        rollout_log_probs=st.logprobs,
        messages=st.messages,
        turn_rewards=st.rewards,
        reward=reward,
        done=st.done,
        truncated=st.truncated,
        stop_reason=st.stop_reason,
        error=st.error,
        task_id=st.task_id,
        turns=st.turns,
        logs=_logs(st, reward),
        info=st.info,
    )


async def _play(env, generate, tokenizer, chat, config, st: _State) -> None:
    finish_reason = "stop"
    for _ in range(config.max_turns):
        remaining = config.max_length - len(st.ids)
        if remaining <= 0:
            st.stop_reason = "token_budget"
            break
        t0 = time.monotonic()
        gen = await generate(list(st.ids), min(config.max_tokens_per_turn, remaining),
                             list(config.stop))
        if not isinstance(gen, Generation):
            gen = Generation(*gen)
        gen_s = time.monotonic() - t0
        st.generation_s += gen_s
        finish_reason = gen.finish_reason
        start = len(st.ids)
        st.ids.extend(gen.token_ids)
        st.ranges.append((start, len(st.ids)))
        if st.logprobs is not None and gen.logprobs is not None:
            st.logprobs.extend(gen.logprobs)
        else:
            st.logprobs = None
        st.messages.append({"role": "assistant", "content": gen.text})

        obs, reward, terminated, truncated, info, env_s = await _step(env, gen.text, st)
        if st.error is not None:
            st.turns.append(_turn(gen, "", 0.0, 0, {}, gen_s, env_s))
            return
        st.rewards.append(reward)
        st.info = info
        if terminated or truncated:
            st.messages.append({"role": config.feedback_role, "content": obs})
            st.turns.append(_turn(gen, obs, reward, 0, info, gen_s, env_s))
            st.done = bool(terminated)
            st.truncated = bool(truncated) or finish_reason == "length"
            st.stop_reason = info.get("stop_reason") or ("submit" if terminated else "max_turns")
            return
        full_action = tokenizer.decode(gen.token_ids, skip_special_tokens=False)
        feedback_ids = _encode(tokenizer, chat.feedback(full_action, obs))
        if len(st.ids) + len(feedback_ids) >= config.max_length:
            # No room for the feedback and a next action: the token budget ends the episode.
            st.turns.append(_turn(gen, obs, reward, 0, info, gen_s, env_s))
            st.stop_reason = "token_budget"
            break
        st.turns.append(_turn(gen, obs, reward, len(feedback_ids), info, gen_s, env_s))
        st.ids.extend(feedback_ids)
        if st.logprobs is not None:
            st.logprobs.extend([0.0] * len(feedback_ids))
        st.messages.append({"role": config.feedback_role, "content": obs})
    else:
        st.stop_reason = "turn_cap"

    # The runner's own budget ended the episode.
    st.truncated = True
    if config.judge_on_budget:
        _obs, reward, _term, _trunc, info, _ = await _step(env, SUBMIT_ACTION, st)
        if st.error is None:
            st.rewards.append(reward)
            st.info = info


async def _step(env, action: str, st: _State):
    t0 = time.monotonic()
    try:
        obs, reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
        reward = float(reward)
    except Exception as exc:  # the env failed: the episode ends with a penalty
        logger.warning("env.step failed: %s", exc, exc_info=True)
        st.error = f"step: {type(exc).__name__}: {exc}"
        obs, reward, terminated, truncated, info = "", 0.0, False, False, {}
    env_s = time.monotonic() - t0
    st.env_s += env_s
    return obs, reward, terminated, truncated, info, env_s


def _turn(gen: Generation, obs: str, reward: float, feedback_tokens: int, info: dict,
          gen_s: float, env_s: float) -> Turn:
    return Turn(
        action=gen.text,
        observation=obs,
        reward=reward,
        finish_reason=gen.finish_reason,
        action_tokens=len(gen.token_ids),
        feedback_tokens=feedback_tokens,
        tool_calls=[c.get("name", "") for c in info.get("tool_calls", [])],
        invalid_action=bool(info.get("invalid_action", False)),
        parse_errors=list(info.get("parse_errors", [])),
        generation_s=gen_s,
        env_s=env_s,
    )


def _encode(tokenizer: ChatTokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _logs(st: _State, reward: float) -> dict[str, float]:
    components = st.info.get("reward_components") or {}
    action_tokens = sum(e - s for s, e in st.ranges)
    logs = {
        "turns": len(st.turns),
        "tool_calls": sum(len(t.tool_calls) for t in st.turns),
        "invalid_actions": sum(t.invalid_action for t in st.turns),
        "env_error": st.error is not None,
        "terminated": st.done,
        "budget_truncated": st.truncated,
        "hit_turn_cap": st.stop_reason == "turn_cap",
        "hit_token_budget": st.stop_reason == "token_budget",
        "final_reward": reward,
        "compiled": bool(components.get("compiled")),
        "correct": bool(components.get("correct")),
        "speedup_vs_eager": components.get("speedup_vs_eager") or 0.0,
        "speedup_vs_compile": components.get("speedup_vs_compile") or 0.0,
        "action_tokens": action_tokens,
        "feedback_tokens": sum(t.feedback_tokens for t in st.turns),
        "total_tokens": len(st.ids),
        "generation_s": st.generation_s,
        "env_s": st.env_s,
    }
    assert tuple(logs) == LOG_KEYS  # internal invariant: the key set never varies
    return {k: float(v) for k, v in logs.items()}
