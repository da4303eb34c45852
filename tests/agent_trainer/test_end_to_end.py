"""End to end: the OpenRLHF executor plays CudaKernel-v0 for real (CPU; CUDA when a GPU is here).

A scripted engine replies with the demo agent's actions (cuda_gym/demo.py), so the episode
builds a C++ kernel, runs, profiles and submits through the real env and judge.
"""

import asyncio
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("openrlhf", reason="the trainer extra (openrlhf) is not installed")

from agent_trainer.config import AgentConfig, RunnerConfig
from agent_trainer.episode import LOG_KEYS
from agent_trainer.openrlhf_agent import CudaGymAgentExecutor
from agent_trainer.tiny import build_tiny_tokenizer
from cuda_gym.demo import DEMO_TASK, scripted_actions
from cuda_gym.judge import JudgeConfig

DEVICES = [pytest.param("cpu", marks=pytest.mark.slow), pytest.param("cuda", marks=pytest.mark.gpu)]


class DemoEngine:
    """Replies with the demo agent's next action, chosen by the number of turns so far."""

    def __init__(self, tokenizer, device):
        self.tokenizer = tokenizer
        self.actions = scripted_actions(device)

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        text = self.tokenizer.decode(prompt_token_ids, skip_special_tokens=False)
        reply = self.actions[text.count("<|im_start|>assistant") - 1]
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [
            self.tokenizer.eos_token_id]
        out = SimpleNamespace(token_ids=ids, text=reply, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


@pytest.mark.parametrize("device", DEVICES)
def test_executor_plays_the_demo_solution_through_the_real_env(device):
    tok = build_tiny_tokenizer()
    judge = JudgeConfig(device=device, timed_runs=5, warmup_runs=1, baselines=("eager",))
    config = AgentConfig(
        env_id="cuda_gym:CudaKernel-v0",
        env_kwargs={"device": device, "max_turns": 20, "judge": judge},
        runner=RunnerConfig(max_turns=20, max_length=60000, max_tokens_per_turn=8000),
        reward_clip=(-1, 3), success_reward=1.0)
    executor = CudaGymAgentExecutor(config)
    label = json.dumps({"task_id": DEMO_TASK, "seed": 0})
    params = SimpleNamespace(max_tokens=None, logprobs=None, stop=None)
    out = asyncio.run(executor.execute("demo", label, params, 60000, tok, DemoEngine(tok, device)))
    logs = out["extra_logs"]
    assert tuple(logs) == LOG_KEYS and logs["env_error"] == 0.0
    assert logs["terminated"] == 1.0 and logs["correct"] == 1.0, logs
    assert out["reward"] >= 1.0 and out["scores"] == 1.0 and out["truncated"] is False
    assert len(out["action_ranges"]) == len(scripted_actions(device))
    for (start, end), action in zip(out["action_ranges"], scripted_actions(device)):
        span = tok.decode(out["observation_tokens"][start:end], skip_special_tokens=True)
        assert span == action
