"""The TRL environment: cuda_gym's tools as methods, the runner's session, and TRL 1.16's trainer.

The last test trains one GRPOTrainer step with the real trainer: TRL renders the tools from the
methods, parses the (scripted) tool calls, calls the methods on pooled env instances playing
CudaKernel-v0 on the CPU, masks the tool results, and scores with `get_reward`.
"""

import inspect
import json
import sys

import gymnasium as gym
import pytest
from transformers.utils import get_json_schema

import cuda_gym
from agent_trainer.config import AgentConfig, RunnerConfig
from agent_trainer.session import RESET_FAILED, SUBMIT_ACTION
from agent_trainer.tiny import build_tiny_model, build_tiny_tokenizer
from agent_trainer.trl_env import EPISODE_OVER, CudaGymToolEnv, environment_factory, trl_rows

ENV_ID = "AgentTrainerScriptedTrl-v0"
if ENV_ID not in gym.registry:
    gym.register(
        ENV_ID, entry_point="tests.agent_trainer.fakes:ScriptedEnv", disable_env_checker=True
    )

LABEL = json.dumps({"task_id": "toy", "seed": 3})


def make_env(**kw):
    runner = kw.pop("runner", RunnerConfig())
    return CudaGymToolEnv(AgentConfig(env_id=ENV_ID, runner=runner, **kw))


def tool_methods(env):
    # What GRPOTrainer exposes as tools: the class's public functions but reset and get_reward.
    return {
        name: getattr(env, name)
        for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    }


def test_the_methods_are_cuda_gyms_tools():
    reference = {
        s["function"]["name"]: s["function"]["parameters"] for s in cuda_gym.tool_schemas()
    }
    methods = tool_methods(CudaGymToolEnv())
    assert set(methods) == set(reference)
    for name, method in methods.items():
        params = get_json_schema(method)["function"]["parameters"]
        assert set(params["properties"]) == set(reference[name]["properties"]), name
        assert set(params.get("required", [])) == set(reference[name].get("required", [])), name


def test_an_episode_goes_through_the_session_and_the_env_is_reused():
    env = make_env(env_kwargs={"final_reward": 3.0}, reward_clip=(-1, 2))
    assert env.reset(prompt=[], label=LABEL) == "Task: make it fast."
    assert env.list_files() == "obs 1: ok"
    assert env.submit() == "obs 2: submitted"
    assert env.read_file("model.py") == EPISODE_OVER
    assert env.get_reward() == 2.0  # 3.0 clipped to the run's range
    gym_env = env.session.env.unwrapped
    assert gym_env.actions == [
        {"name": "list_files", "arguments": {}},
        {"name": "submit", "arguments": {}},
    ]
    assert gym_env.resets == [(3, {"task_id": "toy"})]
    env.reset(label=LABEL)
    assert env.session.env.unwrapped is gym_env and env.session.rewards == []
    env.edit_file("model_new.py", old="a", new="b")
    assert gym_env.actions[-1] == {
        "name": "edit_file",
        "arguments": {"path": "model_new.py", "old": "a", "new": "b"},
    }


def test_budgets_end_the_episode_and_judge_the_workspace():
    env = make_env(runner=RunnerConfig(max_turns=2))
    env.reset(label=LABEL)
    env.list_files()
    assert "The turn budget is spent" in env.compile()
    assert env.session.env.unwrapped.actions[-1] == SUBMIT_ACTION
    assert env.run() == EPISODE_OVER and env.get_reward() == 3.0
    # TRL stopped (no more tool calls): get_reward judges the workspace as it stands.
    env.reset(label=LABEL)
    env.list_files()
    assert env.get_reward() == 3.0 and env.session.env.unwrapped.actions[-1] == SUBMIT_ACTION
    env = make_env(runner=RunnerConfig(judge_on_budget=False))
    env.reset(label=LABEL)
    assert env.get_reward() == 0.0 and env.session.env.unwrapped.actions == []


def test_failures_give_the_penalty_not_an_exception():
    env = make_env()
    with pytest.raises(RuntimeError, match=r"Call reset\(\) before"):
        env.list_files()
    assert env.reset(label="not json") == RESET_FAILED
    assert env.list_files() == EPISODE_OVER and env.get_reward() == -1.0
    env = make_env(env_kwargs={"fail_on": ["step", 1]}, runner=RunnerConfig(env_error_penalty=-3))
    env.reset(label=LABEL)
    assert env.run().startswith("The environment failed (step: RuntimeError")
    assert env.get_reward() == -3.0
    env = make_env(env_kwargs={"no_such_option": 1})
    assert env.reset(label=LABEL) == RESET_FAILED and "gym.make failed" in env.session.error


def test_environment_factory_needs_trl(monkeypatch):
    factory = environment_factory(AgentConfig(env_id=ENV_ID))
    assert isinstance(factory(), CudaGymToolEnv) and factory() is not factory()
    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(ImportError, match=r"pip install trl==1\.16\.0"):
        environment_factory()


@pytest.mark.slow
def test_grpo_trainer_trains_a_step_on_the_real_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_chat_template

    tok = build_tiny_tokenizer()
    tok.chat_template = qwen3_chat_template  # a tool-calling template TRL can parse
    config = AgentConfig(
        env_id="cuda_gym:CudaKernel-v0",
        env_kwargs={"device": "cpu", "max_turns": 4},
        runner=RunnerConfig(max_turns=4),
    )
    label = json.dumps({"task_id": "sigmoid_gated_multiply", "seed": 0})
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        num_generations=2,
        max_steps=1,
        max_completion_length=4096,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
    )
    trainer = GRPOTrainer(
        model=build_tiny_model(tok),
        args=args,
        train_dataset=Dataset.from_list(trl_rows([{"prompt": "", "label": label}], config)),
        processing_class=tok,
        environment_factory=environment_factory(config),
    )
    replies = [
        '<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>',
        "Done.",
    ]
    prompts = []

    def scripted_policy(prompt_ids, images, multimodal_fields, num_generations, **kw):
        # The n-th turn of a rollout (n tool results so far) gets replies[n], then EOS.
        texts = [tok.decode(ids, skip_special_tokens=False) for ids in prompt_ids]
        prompts.extend(texts)
        turns = [min(text.count("<tool_response>"), 2) for text in texts]
        ids = [tok.encode(replies[n], add_special_tokens=False) + [tok.eos_token_id] for n in turns]
        return ids, None

    trainer._generate_single_turn = scripted_policy
    trainer.train()
    logs = trainer.state.log_history[0]
    assert logs["rewards/CudaGymToolEnv/mean"] == -1.0  # submitted with nothing written
    assert logs["tools/call_frequency"] == 2.0 and logs["tools/failure_frequency"] == 0.0
    # Completion lengths count the model's tokens only: TRL masked the tool results.
    model_tokens = sum(len(tok.encode(r, add_special_tokens=False)) + 1 for r in replies)
    assert logs["completions/mean_length"] == model_tokens
    assert "class Model" in prompts[0]  # the task statement (the reference) from reset
    assert '"name": "write_file"' in prompts[0]  # tool schemas rendered from the methods
    assert "model.py  (" in prompts[-1] and "Milestone reward for this state: -1" in prompts[-1]
    for env in trainer._environment_pool[None]:
        assert env.session.rewards == [0.0, -1.0] and env.session.stop_reason == "submit"
