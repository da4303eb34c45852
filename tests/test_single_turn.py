"""CudaKernelSingleTurn-v0: one reply with the whole solution, judged once (CPU device)."""

import json

import gymnasium as gym
import pytest

import cuda_gym
from cuda_gym.demo import CPU_KERNEL, DEMO_TASK, MODEL_NEW
from cuda_gym.single_turn import solution_calls
from tests.conftest import TEST_JUDGE
from tests.fakes import ScriptedJudge


def xml_write(path, content):
    return (f"<tool_call>\n<function=write_file>\n<parameter=path>\n{path}\n</parameter>\n"
            f"<parameter=content>\n{content}\n</parameter>\n</function>\n</tool_call>")


def test_registered_with_the_cuda_kernel_conventions():
    spec = gym.spec(cuda_gym.SINGLE_TURN_ENV_ID)
    assert spec.nondeterministic is True
    env = gym.make(cuda_gym.SINGLE_TURN_ENV_ID, device="cpu", task=DEMO_TASK)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert "exactly one turn" in obs and info["max_turns"] == 1
    env.close()


def test_solution_calls_keep_file_writes_and_read_a_python_block():
    calls, problems = solution_calls(
        '<tool_call>{"name": "compile", "arguments": {}}</tool_call>'
        + xml_write("model_new.py", "x = 1"))
    assert [c["name"] for c in calls] == ["write_file"]
    assert problems == ["'compile' does not run in a single-turn episode; ignored."]
    calls, problems = solution_calls("Here:\n```python\nimport torch\n```\n")
    assert calls == [{"name": "write_file",
                      "arguments": {"path": "model_new.py", "content": "import torch\n"}}]
    assert problems == []
    calls, problems = solution_calls("no code at all")
    assert calls == [] and "no write_file" in problems[-1]


def test_an_empty_reply_is_judged_and_ends_the_episode():
    env = gym.make(
        "cuda_gym:CudaKernelSingleTurn-v0", device="cpu", task=DEMO_TASK, judge=ScriptedJudge()
    )
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("I would write a kernel.")
    assert terminated and not truncated and reward == -1.0
    assert info["stop_reason"] == "submit" and info["invalid_action"] is True
    assert obs.startswith("Note: The reply holds no write_file")
    env.close()


@pytest.mark.slow
def test_one_reply_with_the_demo_solution_is_correct():
    env = gym.make("cuda_gym:CudaKernelSingleTurn-v0", device="cpu", task=DEMO_TASK,
                   judge=TEST_JUDGE)
    env.reset(seed=0)
    reply = "Plan: fuse it.\n" + xml_write("kernels/gated.cpp", CPU_KERNEL) + xml_write(
        "model_new.py", MODEL_NEW)
    obs, reward, terminated, truncated, info = env.step(reply)
    assert terminated and reward >= 1, obs
    assert info["reward_components"]["correct"] is True and info["turn"] == 1
    json.dumps(info["reward_components"])
    env.close()


def test_a_reply_of_many_file_calls_still_ends_in_its_submit():
    """A red team's: 16 file calls pushed the appended submit past the action's limit."""
    from cuda_gym.actions import MAX_TOOL_CALLS

    reply = [
        {"name": "write_file", "arguments": {"path": f"kernels/k{i}.cpp", "content": "int x;\n"}}
        for i in range(MAX_TOOL_CALLS + 2)
    ]
    calls, problems = solution_calls(reply)
    assert len(calls) == MAX_TOOL_CALLS - 1 and "only the first" in problems[-1]
