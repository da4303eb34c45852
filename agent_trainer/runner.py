"""The episode runner: plays one Gym episode with a token-in/token-out model, no trainer needed.

    episode = await run_token_episode(env, generate, tokenizer, RunnerConfig(max_turns=20))

`generate(token_ids, max_tokens, stop)` is any coroutine returning a `Generation`; adapters for
vLLM engines (OpenRLHF), Hugging Face models and OpenAI-compatible servers live beside it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agent_trainer.chat import ChatFormat, ChatTokenizer
from agent_trainer.config import RunnerConfig
from agent_trainer.episode import LOG_KEYS, Episode, Generation, Turn
from agent_trainer.session import SUBMIT_ACTION, EnvSession

logger = logging.getLogger(__name__)

GenerateFn = Callable[[list[int], int, list[str]], Awaitable[Generation]]

__all__ = ["SUBMIT_ACTION", "GenerateFn", "run_token_episode"]


class _State:
    """Mutable token-side bookkeeping of one episode (the env side is an EnvSession)."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.logprobs: list[float] | None = []
        self.ranges: list[tuple[int, int]] = []
        self.messages: list[dict] = []
        self.turns: list[Turn] = []
        self.budget = 0
        self.done = False
        self.truncated = False
        self.stop_reason = ""
        self.generation_s = 0.0


async def run_token_episode(
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
    session = EnvSession(env, config)
    st = _State()
    obs, system = await asyncio.to_thread(session.reset, seed, options)
    st.messages = [{"role": "system", "content": system}, {"role": "user", "content": obs}]
    st.ids = _encode(tokenizer, chat.prompt(st.messages))
    prompt_length = len(st.ids)
    st.logprobs = [0.0] * prompt_length
    st.budget = config.max_length
    if config.max_response_length is not None:
        st.budget = min(st.budget, prompt_length + config.max_response_length)

    if session.error is None:
        await _play(session, generate, tokenizer, chat, config, st)
    if session.error is not None:
        st.stop_reason = "env_error"
        st.done = False
        st.truncated = False
    reward = session.reward
    return Episode(
        token_ids=st.ids,
        prompt_length=prompt_length,
        action_ranges=st.ranges,
        rollout_log_probs=st.logprobs,
        messages=st.messages,
        turn_rewards=list(session.rewards),
        reward=reward,
        done=st.done,
        truncated=st.truncated,
        stop_reason=st.stop_reason,
        error=session.error,
        task_id=session.task_id,
        turns=st.turns,
        logs=_logs(st, session, reward),
        info=session.info,
    )


async def _play(session: EnvSession, generate, tokenizer, chat, config, st: _State) -> None:
    finish_reason = "stop"
    for _ in range(config.max_turns):
        remaining = st.budget - len(st.ids)
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

        step = await asyncio.to_thread(session.step, gen.text)
        obs, reward, info = step.observation, step.reward, step.info
        if session.error is not None:
            st.turns.append(_turn(gen, "", 0.0, 0, {}, gen_s, step.env_s))
            return
        if session.ended:
            st.messages.append({"role": config.feedback_role, "content": obs})
            st.turns.append(_turn(gen, obs, reward, 0, info, gen_s, step.env_s))
            st.done = session.terminated
            st.truncated = session.truncated or finish_reason == "length"
            st.stop_reason = session.stop_reason
            return
        full_action = tokenizer.decode(gen.token_ids, skip_special_tokens=False)
        feedback_ids = _encode(tokenizer, chat.feedback(full_action, obs))
        if len(st.ids) + len(feedback_ids) >= st.budget:
            # No room for the feedback and a next action: the token budget ends the episode.
            st.turns.append(_turn(gen, obs, reward, 0, info, gen_s, step.env_s))
            st.stop_reason = "token_budget"
            break
        st.turns.append(_turn(gen, obs, reward, len(feedback_ids), info, gen_s, step.env_s))
        st.ids.extend(feedback_ids)
        if st.logprobs is not None:
            st.logprobs.extend([0.0] * len(feedback_ids))
        st.messages.append({"role": config.feedback_role, "content": obs})
    else:
        st.stop_reason = "turn_cap"

    # The runner's own budget ended the episode.
    st.truncated = True
    await asyncio.to_thread(session.submit_on_budget)


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


def _logs(st: _State, session: EnvSession, reward: float) -> dict[str, float]:
    components = session.info.get("reward_components") or {}
    action_tokens = sum(e - s for s, e in st.ranges)
    logs = {
        "turns": len(st.turns),
        "tool_calls": sum(len(t.tool_calls) for t in st.turns),
        "invalid_actions": sum(t.invalid_action for t in st.turns),
        "env_error": session.error is not None,
        "infra_error": session.infra_error,
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
        "env_s": session.env_s,
    }
    assert tuple(logs) == LOG_KEYS  # internal invariant: the key set never varies
    return {k: float(v) for k, v in logs.items()}
