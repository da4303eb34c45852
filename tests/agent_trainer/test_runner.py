"""The episode runner: token spans, rewards, budgets, env failures, fixed log keys."""

import asyncio

import pytest

from agent_trainer.config import RunnerConfig
from agent_trainer.episode import LOG_KEYS
from agent_trainer.runner import SUBMIT_ACTION, run_token_episode
from agent_trainer.tiny import build_tiny_tokenizer
from tests.agent_trainer.fakes import ScriptedEnv, ScriptedModel


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def play(env, model, tok, **config):
    return asyncio.run(run_token_episode(env, model, tok, RunnerConfig(**config), seed=7,
                                   options={"task_id": "toy"}))


def test_action_spans_cover_exactly_the_model_text(tok):
    env = ScriptedEnv(final_reward=3.0)
    replies = ["<tool_call>run</tool_call>", "think... <tool_call>submit</tool_call>"]
    model = ScriptedModel(tok, replies)
    ep = play(env, model, tok)
    assert env.resets == [(7, {"task_id": "toy"})]
    assert ep.done and not ep.truncated and ep.stop_reason == "submit"
    assert ep.turn_rewards == [0.0, 3.0] and ep.reward == 3.0
    assert len(ep.action_ranges) == 2
    for (start, end), reply in zip(ep.action_ranges, replies):
        span = tok.decode(ep.token_ids[start:end], skip_special_tokens=False)
        assert span == reply + "<|im_end|>"
    # Everything outside the spans is prompt or chat-template feedback, never model text.
    outside = [t for i, t in enumerate(ep.token_ids)
               if not any(s <= i < e for s, e in ep.action_ranges)]
    text = tok.decode(outside, skip_special_tokens=False)
    assert "obs 1: ok" in text and "<tool_call>" not in text.split("Task: make it fast.")[1]
    # The whole sequence is what the chat template renders for the conversation.
    full = tok.decode(ep.token_ids, skip_special_tokens=False)
    rendered = tok.apply_chat_template(ep.messages[:-1], tokenize=False)
    assert full == rendered.removesuffix("\n")
    assert ep.token_ids[: ep.prompt_length] == model.calls[0][0]
    assert model.calls[1][0] == ep.token_ids[: ep.action_ranges[1][0]]
    assert len(ep.rollout_log_probs) == len(ep.token_ids)
    for i, lp in enumerate(ep.rollout_log_probs):
        in_action = any(s <= i < e for s, e in ep.action_ranges)
        assert lp == (-0.5 if in_action else 0.0)
    assert "submit" in ep.messages[0]["content"]  # tool schemas from the env's info
    assert ep.task_id == "toy" and ep.messages[-1]["content"] == "obs 2: submitted"


def test_logs_have_the_fixed_key_set_in_every_outcome(tok):
    outcomes = [
        play(ScriptedEnv(), ScriptedModel(tok, ["submit"]), tok),
        play(ScriptedEnv(fail_on=("step", 1)), ScriptedModel(tok, ["x"]), tok),
        play(ScriptedEnv(fail_on=("reset", 0)), ScriptedModel(tok, []), tok),
        play(ScriptedEnv(), ScriptedModel(tok, ["a", "b"]), tok, max_turns=2),
    ]
    for ep in outcomes:
        assert tuple(ep.logs) == LOG_KEYS
        assert all(isinstance(v, float) for v in ep.logs.values())
    assert outcomes[0].logs["correct"] == 1.0 and outcomes[0].logs["speedup_vs_eager"] == 1.5
    assert outcomes[0].logs["speedup_vs_compile"] == 0.0


def test_env_exception_in_step_becomes_a_penalty(tok):
    env = ScriptedEnv(fail_on=("step", 2))
    ep = play(env, ScriptedModel(tok, ["a", "b", "c"]), tok, env_error_penalty=-2.0)
    assert ep.reward == -2.0 and ep.stop_reason == "env_error"
    assert "compiler service lost" in ep.error
    assert not ep.done and not ep.truncated
    assert len(ep.action_ranges) == 2 and ep.logs["env_error"] == 1.0


def test_env_exception_in_reset_becomes_a_penalty(tok):
    model = ScriptedModel(tok, [])
    ep = play(ScriptedEnv(fail_on=("reset", 0)), model, tok)
    assert ep.reward == -1.0 and ep.stop_reason == "env_error" and "reset exploded" in ep.error
    assert ep.action_ranges == [] and model.calls == [] and ep.prompt_length > 0


def test_turn_cap_truncates_and_judges_the_workspace(tok):
    env = ScriptedEnv(final_reward=2.0)
    ep = play(env, ScriptedModel(tok, ["a", "b"]), tok, max_turns=2)
    assert ep.truncated and not ep.done and ep.stop_reason == "turn_cap"
    assert env.actions == ["a", "b", SUBMIT_ACTION]
    assert ep.turn_rewards == [0.0, 0.0, 2.0] and ep.reward == 2.0
    assert len(ep.action_ranges) == 2 and ep.logs["hit_turn_cap"] == 1.0


def test_turn_cap_without_judging(tok):
    env = ScriptedEnv()
    ep = play(env, ScriptedModel(tok, ["a"]), tok, max_turns=1, judge_on_budget=False)
    assert env.actions == ["a"] and ep.reward == 0.0 and ep.truncated


def test_env_truncation_is_reported(tok):
    env = ScriptedEnv(max_turns=2)
    ep = play(env, ScriptedModel(tok, ["a", "b"]), tok)
    assert ep.truncated and not ep.done and ep.stop_reason == "max_turns"
    assert ep.reward == -1.0 and env.actions == ["a", "b"]


def test_token_budget_caps_turns_and_the_sequence(tok):
    env = ScriptedEnv()
    model = ScriptedModel(tok, ["x" * 30] * 10)
    first = asyncio.run(run_token_episode(ScriptedEnv(), ScriptedModel(tok, ["submit"]), tok))
    budget = first.prompt_length + 100
    ep = play(env, model, tok, max_length=budget, max_tokens_per_turn=40)
    assert ep.truncated and ep.stop_reason == "token_budget"
    assert len(ep.token_ids) <= budget
    assert all(call[1] <= 40 for call in model.calls)
    assert env.actions[-1] == SUBMIT_ACTION
    assert ep.logs["hit_token_budget"] == 1.0


def test_a_final_turn_cut_at_the_length_limit_is_truncated(tok):
    env = ScriptedEnv()
    model = ScriptedModel(tok, ["a", "submit now"], finish_reasons=["stop", "length"])
    ep = play(env, model, tok)
    assert ep.done and ep.truncated
    # The cut turn has no end-of-turn token; the next feedback would have closed it.
    s, e = ep.action_ranges[1]
    assert tok.decode(ep.token_ids[s:e]) == "submit now"


def test_missing_logprobs_give_none(tok):
    ep = play(ScriptedEnv(), ScriptedModel(tok, ["a", "submit"], logprobs=False), tok)
    assert ep.rollout_log_probs is None


def test_feedback_glue_closes_a_turn_without_end_token(tok):
    model = ScriptedModel(tok, ["a", "submit"], finish_reasons=["length", "stop"])
    ep = play(ScriptedEnv(), model, tok)
    full = tok.decode(ep.token_ids, skip_special_tokens=False)
    assert "a<|im_end|>\n<|im_start|>user\nobs 1: ok<|im_end|>\n<|im_start|>assistant\n" in full


def test_stop_strings_and_per_turn_cap_reach_generate(tok):
    model = ScriptedModel(tok, ["submit"])
    play(ScriptedEnv(), model, tok, stop=["</tool_call>"], max_tokens_per_turn=99)
    assert model.calls[0][1:] == (99, ["</tool_call>"])


LLAMA_LIKE = (
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def test_feedback_glue_follows_any_chat_template():
    from agent_trainer.chat import ChatFormat

    tok = build_tiny_tokenizer()
    tok.chat_template = LLAMA_LIKE
    chat = ChatFormat(tok, "user")
    expected = ("<|start_header_id|>user<|end_header_id|>\n\nobs<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert chat.feedback("call<|eot_id|>", "obs") == expected
    assert chat.feedback("call", "obs") == "<|eot_id|>" + expected
    # Overlap is never found in plain whitespace or in the feedback itself.
    assert chat.feedback("call\n", "obs") == "<|eot_id|>" + expected


def test_response_budget_caps_what_follows_the_first_prompt(tok):
    env = ScriptedEnv()
    model = ScriptedModel(tok, ["x" * 30] * 10)
    ep = play(env, model, tok, max_response_length=100, max_tokens_per_turn=40)
    assert ep.truncated and ep.stop_reason == "token_budget"
    assert len(ep.token_ids) - ep.prompt_length <= 100
    assert env.actions[-1] == SUBMIT_ACTION
    with pytest.raises(ValueError, match="max_response_length must be at least 1"):
        RunnerConfig(max_response_length=0)
