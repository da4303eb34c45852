"""The verl agent loop against the real verl 0.9.1 code: registry, hydra, postprocess, dataset.

The loop is built the way verl's AgentLoopWorker builds it (agent-loop YAML into the registry,
`hydra.utils.instantiate` with the worker's arguments), played with a fake LLM server client that
returns verl's own `TokenOutput`, and its output is batched by the worker's real
`_agent_loop_postprocess` and `_postprocess` (padding, masks, `rm_scores`).
"""

import asyncio
import json
import subprocess
import sys
from types import SimpleNamespace

import gymnasium as gym
import pytest

pytest.importorskip("verl", reason="the trainer extra (verl) is not installed")
import hydra  # noqa: E402
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopOutput,
    AgentLoopWorker,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from agent_trainer.config import AgentConfig, RunnerConfig
from agent_trainer.dataset import dataset_rows, source_from_spec
from agent_trainer.episode import LOG_KEYS
from agent_trainer.tiny import build_tiny_tokenizer
from agent_trainer.verl_agent import (
    AGENT_NAME,
    CudaGymAgentLoop,
    write_agent_loop_config,
    write_verl_dataset,
)

ENV_ID = "AgentTrainerScriptedVerl-v0"
if ENV_ID not in gym.registry:
    gym.register(
        ENV_ID, entry_point="tests.agent_trainer.fakes:ScriptedEnv", disable_env_checker=True
    )

LABEL = json.dumps({"task_id": "toy", "seed": 3})
REPLIES = ["<tool_call>run</tool_call>", "<tool_call>submit</tool_call>"]


class FakeServer:
    """verl LLMServerClient stand-in: the n-th turn of an episode gets REPLIES[n]."""

    def __init__(self, tok, replies=REPLIES, logprob=-0.25):
        self.tok = tok
        self.replies = replies
        self.logprob = logprob
        self.calls = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append((request_id, list(prompt_ids), dict(sampling_params), kwargs))
        text = self.tok.decode(prompt_ids, skip_special_tokens=False)
        turn = text.count("<|im_start|>assistant") - 1
        reply = self.replies[min(turn, len(self.replies) - 1)]
        ids = self.tok.encode(reply, add_special_tokens=False) + [self.tok.eos_token_id]
        ids = ids[: sampling_params["max_tokens"]]
        logprobs = [self.logprob] * len(ids) if sampling_params.get("logprobs") else None
        await asyncio.sleep(0)
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def trainer_config(prompt_length=4096, response_length=4096):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": prompt_length, "response_length": response_length}
            },
            "data": {},
        }
    )


def build_loop(tmp_path, tok, server, cfg, agent=None):
    """Register the run's YAML and instantiate the loop as AgentLoopWorker does."""
    agent = agent or AgentConfig(env_id=ENV_ID)
    path = write_agent_loop_config(tmp_path, agent)
    for entry in OmegaConf.load(path):
        _agent_loop_registry[entry.name] = entry
    return hydra.utils.instantiate(
        config=_agent_loop_registry[AGENT_NAME],
        trainer_config=DictConfigWrap(config=cfg),
        server_manager=server,
        tokenizer=tok,
        processor=None,
        hf_model_type=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )


def row(label=LABEL):
    return {
        "raw_prompt": [{"role": "user", "content": "Task toy"}],
        "label": label,
        "index": 0,
        "extra_info": {"index": 0},
    }


def run(loop, **kwargs):
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True, **kwargs}
    return asyncio.run(loop.run(dict(params), **row(kwargs.pop("label", LABEL))))


def verl_batch(outputs, tok, cfg):
    """verl's worker postprocessing (padding, masks, rm_scores) of our outputs."""
    worker = object.__new__(AgentLoopWorker)
    rollout = cfg.actor_rollout_ref.rollout
    worker.rollout_config = SimpleNamespace(
        prompt_length=rollout.prompt_length, response_length=rollout.response_length
    )
    worker.tokenizer, worker.processor, worker.mm_processor_kwargs = tok, None, {}
    worker.reward_loop_worker_handles, worker.distillation_enabled = None, False

    async def post():
        return [await worker._agent_loop_postprocess(o, False, **row()) for o in outputs]

    return worker._postprocess(asyncio.run(post()))


@pytest.fixture(autouse=True)
def keep_registry():
    saved = dict(_agent_loop_registry)
    yield
    _agent_loop_registry.clear()
    _agent_loop_registry.update(saved)


def test_register_names_the_loop():
    assert issubclass(CudaGymAgentLoop, AgentLoopBase)
    assert _agent_loop_registry[AGENT_NAME] == {
        "_target_": "agent_trainer.verl_agent.CudaGymAgentLoop"
    }


def test_loop_from_the_run_yaml_plays_an_episode_verl_can_batch(tmp_path, tok):
    cfg = trainer_config()
    server = FakeServer(tok)
    loop = build_loop(tmp_path, tok, server, cfg, AgentConfig(env_id=ENV_ID, reward_clip=(-5, 2)))
    assert isinstance(loop, CudaGymAgentLoop) and loop.agent_config.reward_clip == (-5.0, 2.0)
    out = run(loop)
    assert isinstance(out, AgentLoopOutput)
    # The response mask is 1 exactly on the model's replies (each ends with its EOS token).
    marked = [t for t, m in zip(out.response_ids, out.response_mask) if m]
    assert (
        tok.decode(marked, skip_special_tokens=False) == "<|im_end|>".join(REPLIES) + "<|im_end|>"
    )
    feedback = [t for t, m in zip(out.response_ids, out.response_mask) if not m]
    assert "obs 1: ok" in tok.decode(feedback) and "<tool_call>" not in tok.decode(feedback)
    assert "Task: make it fast." in tok.decode(out.prompt_ids)
    assert server.calls[0][1] == out.prompt_ids  # the first prompt is the runner's prompt
    assert all(call[0] == server.calls[0][0] for call in server.calls)  # one request id
    assert server.calls[0][2]["max_tokens"] == 4096 and server.calls[0][2]["logprobs"] is True
    assert len(out.response_logprobs) == len(out.response_ids)
    assert all(
        lp == (-0.25 if m else 0.0) for lp, m in zip(out.response_logprobs, out.response_mask)
    )
    assert out.reward_score == 2.0  # the env's 3.0, clipped to the run's range
    assert out.num_turns == 5 and out.extra_fields["turn_scores"] == [0.0, 3.0]
    info = out.extra_fields["reward_extra_info"]
    assert list(info) == [*LOG_KEYS, "success"] and info["success"] == 1.0
    # verl's own postprocessing turns it into the training batch.
    batch = verl_batch([out, out], tok, cfg)
    n = len(out.response_ids)
    assert batch.batch["responses"].shape == (2, 4096)
    assert batch.batch["responses"][0, :n].tolist() == out.response_ids
    assert batch.batch["response_mask"][0, :n].tolist() == out.response_mask
    assert batch.batch["response_mask"][0, n:].sum() == 0
    assert batch.batch["prompts"][0, -len(out.prompt_ids) :].tolist() == out.prompt_ids
    rm = batch.batch["rm_scores"][0]
    assert rm[n - 1] == 2.0 and rm.sum() == 2.0
    assert batch.batch["rollout_log_probs"].shape == (2, 4096)
    assert batch.meta_info["reward_extra_keys"] == [*LOG_KEYS, "success"]
    assert list(batch.non_tensor_batch["final_reward"]) == [3.0, 3.0]


def test_response_length_bounds_the_episode(tmp_path, tok):
    cfg = trainer_config(response_length=60)
    server = FakeServer(tok, replies=["<tool_call>run</tool_call>" * 2])
    out = run(build_loop(tmp_path, tok, server, cfg))
    assert len(out.response_ids) <= 60
    info = out.extra_fields["reward_extra_info"]
    assert info["hit_token_budget"] == 1.0 and info["budget_truncated"] == 1.0
    assert out.reward_score == 3.0  # the workspace was judged when the budget ran out
    assert verl_batch([out], tok, cfg).batch["responses"].shape == (1, 60)


def test_a_bad_label_gives_one_trainable_token_with_the_penalty(tmp_path, tok):
    cfg = trainer_config()
    out = run(build_loop(tmp_path, tok, FakeServer(tok), cfg), label="not json")
    assert out.response_mask == [1] and len(out.response_ids) == 1
    assert out.reward_score == -1.0
    assert out.extra_fields["reward_extra_info"]["env_error"] == 1.0


def test_a_prompt_longer_than_verl_allows_is_refused_naming_the_fix(tmp_path, tok):
    loop = build_loop(tmp_path, tok, FakeServer(tok), trainer_config(prompt_length=50))
    with pytest.raises(ValueError, match="raise data.max_prompt_length to at least"):
        run(loop)


def test_verl_dataset_rows_load_in_verls_dataset(tmp_path, tok):
    rows = dataset_rows([source_from_spec("builtin")], include=["row_softmax"])
    path = write_verl_dataset(rows, tmp_path / "train.parquet")
    config = OmegaConf.create({"max_prompt_length": 1024, "filter_overlong_prompts": False})
    item = RLHFDataset(data_files=[str(path)], tokenizer=tok, config=config)[0]
    assert item["agent_name"] == AGENT_NAME and item["label"] == rows[0]["label"]
    assert item["raw_prompt"] == [{"role": "user", "content": rows[0]["prompt"]}]


@pytest.mark.slow
def test_loop_plays_the_real_env_on_the_cpu(tmp_path, tok):
    replies = [
        '<tool_call>{"name": "read_file", "arguments": {"path": "model.py"}}</tool_call>',
        '<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
    ]
    agent = AgentConfig(
        env_id="cuda_gym:CudaKernel-v0",
        env_kwargs={"device": "cpu", "max_turns": 4},
        runner=RunnerConfig(max_turns=4),
    )
    cfg = trainer_config(prompt_length=8192, response_length=8192)
    label = json.dumps({"task_id": "sigmoid_gated_multiply", "seed": 0})
    out = run(build_loop(tmp_path, tok, FakeServer(tok, replies), cfg, agent), label=label)
    info = out.extra_fields["reward_extra_info"]
    assert info["env_error"] == 0.0 and info["terminated"] == 1.0 and info["turns"] == 2.0
    assert info["correct"] == 0.0 and out.reward_score == -1.0  # nothing was written
    marked = [t for t, m in zip(out.response_ids, out.response_mask) if m]
    assert tok.decode(marked, skip_special_tokens=True) == "".join(replies)
    assert "class Model" in tok.decode(out.response_ids)  # read_file's feedback


def test_missing_verl_gives_a_clear_error_and_agent_trainer_still_imports():
    code = (
        "import sys; sys.modules['verl'] = None\n"
        "import agent_trainer\n"
        "try:\n"
        "    import agent_trainer.verl_agent\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "agent_trainer.verl_agent needs verl" in out.stdout
    assert "pip install verl==0.9.1" in out.stdout
