"""The OpenRLHF executor against the real openrlhf 0.11.2 base class, with a fake vLLM engine."""

import asyncio
import importlib.util
import json
from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch

pytest.importorskip("openrlhf", reason="the trainer extra (openrlhf) is not installed")
from openrlhf.utils.agent import AgentExecutorBase

from agent_trainer.agent_func import load_agent_config, write_agent_func
from agent_trainer.config import AgentConfig, RunnerConfig
from agent_trainer.dataset import parse_label
from agent_trainer.episode import LOG_KEYS
from agent_trainer.openrlhf_agent import CudaGymAgentExecutor
from agent_trainer.tiny import build_tiny_tokenizer
from tests.agent_trainer.fakes import ScriptedEnv

ENV_ID = "AgentTrainerScripted-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point="tests.agent_trainer.fakes:ScriptedEnv",
                 disable_env_checker=True)

RESULT_KEYS = {"prompt", "label", "images", "mm_train_inputs", "observation_tokens",
               "action_ranges", "rollout_log_probs", "reward", "scores", "extra_logs",
               "truncated"}


class FakeEngine:
    """vLLM engine actor stand-in: replies `run` twice, then `submit`; log-prob -0.25."""

    def __init__(self, tokenizer, replies_before_submit=2):
        self.tokenizer = tokenizer
        self.before = replies_before_submit
        self.params = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.params.append(sampling_params)
        await asyncio.sleep(0.01)
        text = self.tokenizer.decode(prompt_token_ids, skip_special_tokens=False)
        turns = text.count("<|im_start|>assistant") - 1
        reply = "<tool_call>submit</tool_call>" if turns >= self.before else "<tool_call>run"
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [
            self.tokenizer.eos_token_id]
        ids = ids[: sampling_params.max_tokens]
        logprobs = [{t: SimpleNamespace(logprob=-0.25), 7: SimpleNamespace(logprob=-9.0)}
                    for t in ids]
        reason = "length" if len(ids) == sampling_params.max_tokens else "stop"
        out = SimpleNamespace(token_ids=ids, text=reply, finish_reason=reason, logprobs=logprobs)
        return SimpleNamespace(outputs=[out])


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def params(**kw):
    return SimpleNamespace(**{"max_tokens": 512, "logprobs": 1, "stop": None,
                              "temperature": 1.0, **kw})


def execute(executor, tok, engine, label, sp=None, max_length=4096):
    return asyncio.run(executor.execute("Task toy", label, sp or params(), max_length, tok,
                                        engine))


def agent(**kw):
    runner = kw.pop("runner", RunnerConfig())
    env_kwargs = kw.pop("env_kwargs", {})
    return AgentConfig(env_id=ENV_ID, env_kwargs=env_kwargs, runner=runner, **kw)


LABEL = json.dumps({"task_id": "toy", "seed": 3})


def test_output_contract(tok):
    executor = CudaGymAgentExecutor(agent(reward_clip=(-5, 5), success_reward=2.0))
    assert isinstance(executor, AgentExecutorBase)
    engine = FakeEngine(tok)
    sp = params()
    out = execute(executor, tok, engine, LABEL, sp)
    assert set(out) == RESULT_KEYS
    assert out["prompt"] == "Task toy" and out["label"] == LABEL
    tokens, ranges = out["observation_tokens"], out["action_ranges"]
    assert all(isinstance(t, int) for t in tokens)
    assert len(ranges) == 3
    for start, end in ranges:
        span = tok.decode(tokens[start:end], skip_special_tokens=False)
        assert span.startswith("<tool_call>") and span.endswith("<|im_end|>")
    assert len(out["rollout_log_probs"]) == len(tokens)
    marked = [i for s, e in ranges for i in range(s, e)]
    assert all(out["rollout_log_probs"][i] == -0.25 for i in marked)
    assert sum(out["rollout_log_probs"]) == pytest.approx(-0.25 * len(marked))
    assert out["reward"] == 3.0 and out["scores"] == 1.0 and out["truncated"] is False
    assert tuple(out["extra_logs"]) == LOG_KEYS
    # What OpenRLHF's samples_generator does with the values must work.
    for value in [out["reward"], out["scores"], *out["extra_logs"].values()]:
        torch.tensor([value])
    mask = torch.zeros(len(tokens), dtype=torch.long)
    for s, e in ranges:
        mask[s:e] = 1
    assert mask.sum().item() == len(marked)
    # The shared sampling params are never changed (each call gets a copy).
    assert sp.max_tokens == 512 and all(p is not sp for p in engine.params)


def test_terminal_reward_is_clipped_and_scores_are_binary(tok):
    out = execute(CudaGymAgentExecutor(agent(reward_clip=(-1, 2))), tok, FakeEngine(tok), LABEL)
    assert out["reward"] == 2.0 and out["scores"] == 1.0
    low = agent(env_kwargs={"final_reward": 1.0})
    out = execute(CudaGymAgentExecutor(low), tok, FakeEngine(tok), LABEL)
    assert out["reward"] == 1.0 and out["scores"] == 0.0


def test_env_exception_gives_a_penalty_not_an_exception(tok):
    config = agent(env_kwargs={"fail_on": ["step", 2]}, runner=RunnerConfig(env_error_penalty=-3))
    out = execute(CudaGymAgentExecutor(config), tok, FakeEngine(tok), LABEL)
    assert out["reward"] == -3.0 and out["scores"] == 0.0
    assert out["extra_logs"]["env_error"] == 1.0 and len(out["action_ranges"]) == 2
    assert tuple(out["extra_logs"]) == LOG_KEYS


@pytest.mark.parametrize("case", ["make", "reset", "label"])
def test_failure_before_the_first_turn_still_gives_a_trainable_sample(tok, case):
    env_kwargs = {"no_such_option": 1} if case == "make" else {}
    if case == "reset":
        env_kwargs = {"fail_on": ["reset", 0]}
    label = "not json" if case == "label" else LABEL
    out = execute(CudaGymAgentExecutor(agent(env_kwargs=env_kwargs)), tok, FakeEngine(tok),
                  label)
    assert out["reward"] == -1.0 and out["extra_logs"]["env_error"] == 1.0
    (start, end), = out["action_ranges"]
    assert end - start == 1 and end == len(out["observation_tokens"])
    assert len(out["rollout_log_probs"]) == end


def test_truncated_when_the_turn_cap_ends_the_episode(tok):
    config = agent(runner=RunnerConfig(max_turns=2))
    out = execute(CudaGymAgentExecutor(config), tok, FakeEngine(tok, replies_before_submit=5),
                  LABEL)
    assert out["truncated"] is True and out["extra_logs"]["hit_turn_cap"] == 1.0
    assert out["reward"] == 3.0  # the workspace was submitted when the budget ran out


def test_truncated_when_the_token_budget_ends_the_episode(tok):
    executor = CudaGymAgentExecutor(agent())
    first = execute(executor, tok, FakeEngine(tok), LABEL)
    budget = first["action_ranges"][0][0] + 40
    out = execute(executor, tok, FakeEngine(tok), LABEL, max_length=budget)
    assert out["truncated"] is True and len(out["observation_tokens"]) <= budget


def test_no_logprobs_requested_gives_none(tok):
    out = execute(CudaGymAgentExecutor(agent()), tok, FakeEngine(tok), LABEL,
                  params(logprobs=None))
    assert out["rollout_log_probs"] is None


def test_concurrent_episodes_are_bounded_per_engine(tok):
    executor = CudaGymAgentExecutor(agent(max_concurrent_episodes=2))
    engine = FakeEngine(tok)
    ScriptedEnv.active = ScriptedEnv.max_active = 0  # other modules may leave envs open

    async def many():
        return await asyncio.gather(*[
            executor.execute("p", LABEL, params(), 4096, tok, engine) for _ in range(6)])

    outs = asyncio.run(many())
    assert len(outs) == 6 and all(o["reward"] == 3.0 for o in outs)
    assert ScriptedEnv.max_active == 2 and ScriptedEnv.active == 0


def test_parse_label():
    assert parse_label('{"task_id": "a", "seed": 4}') == ({"task_id": "a"}, 4)
    assert parse_label({"task": "/x/t.py"}) == ({"task": "/x/t.py"}, None)
    with pytest.raises(ValueError, match="names no task"):
        parse_label("{}")


def test_generated_agent_func_loads_like_openrlhf_loads_it(tmp_path, tok):
    config = agent(max_concurrent_episodes=3, env_kwargs={"final_reward": 2.0})
    path = write_agent_func(tmp_path / "run", config)
    # OpenRLHF's _load_agent_executor: import by path as "agent_module", build with no args.
    spec = importlib.util.spec_from_file_location("agent_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, AgentExecutorBase)
    executor = module.AgentExecutor()
    assert executor.config == config
    out = execute(executor, tok, FakeEngine(tok), LABEL)
    assert out["reward"] == 2.0
    (tmp_path / "run" / "agent_config.json").write_text(
        (tmp_path / "run" / "agent_config.json").read_text().replace("3", "4"))
    with pytest.raises(ValueError, match="changed after agent_func.py was generated"):
        module.AgentExecutor()
    assert load_agent_config(tmp_path / "run" / "agent_config.json").max_concurrent_episodes == 4


def test_trajectory_dir_records_episodes(tmp_path, tok):
    executor = CudaGymAgentExecutor(agent(trajectory_dir=str(tmp_path)))
    execute(executor, tok, FakeEngine(tok), LABEL)
    (path,) = tmp_path.glob("episodes-*.jsonl")
    row = json.loads(path.read_text())
    assert row["label"] == LABEL and row["reward"] == 3.0 and row["stop_reason"] == "submit"
