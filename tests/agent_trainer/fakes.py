"""Test doubles for the trainer: a scripted text env and a scripted token-level model."""

from __future__ import annotations

import json
import threading

import gymnasium as gym

from agent_trainer.episode import Generation
from cuda_gym.spaces import AgentText


class ScriptedEnv(gym.Env):
    """A text env: each step answers "obs N"; `submit` in the action ends with `final_reward`.

    Actions are text or parsed calls (dicts, matched on their JSON text).

    `fail_on` = ("reset" | "step", n) raises RuntimeError at that call.
    """

    active = 0
    max_active = 0
    _lock = threading.Lock()

    def __init__(self, final_reward=3.0, max_turns=10, fail_on=None):
        self.action_space = AgentText(10_000)
        self.observation_space = AgentText(10_000)
        self.final_reward = final_reward
        self.max_turns = max_turns
        self.fail_on = tuple(fail_on) if fail_on else None
        self.actions = []
        self.resets = []
        self.closed = False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets.append((seed, options))
        with ScriptedEnv._lock:
            ScriptedEnv.active += 1
            ScriptedEnv.max_active = max(ScriptedEnv.max_active, ScriptedEnv.active)
        if self.fail_on == ("reset", 0):
            raise RuntimeError("reset exploded")
        self.actions = []
        tools = [{"type": "function", "function": {"name": "submit", "parameters": {}}}]
        return "Task: make it fast.", {"task_id": "toy", "tools": tools}

    def step(self, action):
        self.actions.append(action)
        if not isinstance(action, str):  # a parsed call, e.g. {"name": "submit", "arguments": {}}
            action = json.dumps(action)
        n = len(self.actions)
        if self.fail_on == ("step", n):
            raise RuntimeError("compiler service lost")
        calls = [{"name": "submit"}] if "submit" in action else [{"name": "run"}]
        info = {"tool_calls": calls, "invalid_action": "bad" in action, "parse_errors": []}
        if "submit" in action:
            info.update(stop_reason="submit", reward_components={"compiled": True,
                                                                 "correct": True,
                                                                 "speedup_vs_eager": 1.5,
                                                                 "speedup_vs_compile": None})
            return f"obs {n}: submitted", self.final_reward, True, False, info
        if n >= self.max_turns:
            info["stop_reason"] = "max_turns"
            return f"obs {n}: out of turns", -1.0, False, True, info
        return f"obs {n}: ok", 0.0, False, False, info

    def close(self):
        if self.resets and not self.closed:
            with ScriptedEnv._lock:
                ScriptedEnv.active -= 1
        self.closed = True


class ScriptedModel:
    """`generate` that replies with the scripted texts in order, ending each with EOS.

    Records every call; the log-prob of each token is -0.5 (or None with `logprobs=False`).
    """

    def __init__(self, tokenizer, replies, logprobs=True, finish_reasons=None):
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.logprobs = logprobs
        self.finish_reasons = list(finish_reasons or [])
        self.calls = []

    async def __call__(self, token_ids, max_tokens, stop):
        self.calls.append((list(token_ids), max_tokens, list(stop)))
        text = self.replies.pop(0)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        reason = self.finish_reasons.pop(0) if self.finish_reasons else "stop"
        if reason == "stop":
            ids = ids + [self.tokenizer.eos_token_id]
        ids = ids[:max_tokens]
        lps = [-0.5] * len(ids) if self.logprobs else None
        if len(ids) == max_tokens:
            reason = "length"
        return Generation(ids, text, lps, reason)


SCRIPTED_ENV_ID = "AgentTrainerScripted-v0"
"""ScriptedEnv's id; `tests.agent_trainer.fakes:AgentTrainerScripted-v0` makes it in any process."""
if SCRIPTED_ENV_ID not in gym.registry:
    gym.register(SCRIPTED_ENV_ID, entry_point=ScriptedEnv, disable_env_checker=True)
