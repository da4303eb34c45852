"""What the agent reads after a step: read_file cut at whole lines, the invalid-action budget."""

import gymnasium as gym
import pytest

from tests.fakes import ScriptedJudge
from tests.solutions import TASK_ID


@pytest.fixture
def env():
    env = gym.make(
        "CudaKernel-v0",
        device="cpu",
        task=TASK_ID,
        judge=ScriptedJudge("cpu"),
        max_observation_chars=1000,
        max_invalid_actions=3,
    )
    env.reset(seed=0)
    yield env
    env.close()


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


def test_read_file_stops_at_a_line_boundary_and_says_how_to_read_on(env):
    content = "\n".join(f"// line {i:03d} " + "x" * 40 for i in range(1, 101)) + "\n"
    env.step(call("write_file", path="kernels/long.cpp", content=content))
    obs, *_ = env.step(call("read_file", path="kernels/long.cpp"))
    lines = obs.splitlines()
    last = int(lines[-2].split()[0])
    assert lines[0] == f"kernels/long.cpp (lines 1-{last} of 100):"
    assert lines[-2].endswith("x" * 40)  # the last line shown is whole
    assert lines[-1] == (
        f"[lines {last + 1}-100 not shown: the output limit is 1000 characters; read on with "
        f'read_file(path="kernels/long.cpp", start_line={last + 1})]'
    )
    assert len(obs) <= 1000
    obs, *_ = env.step(call("read_file", path="kernels/long.cpp", start_line=last + 1))
    assert obs.splitlines()[1].lstrip().startswith(f"{last + 1}  // line {last + 1:03d}")


def test_an_invalid_action_shows_the_budget_left(env):
    obs, _, _, truncated, info = env.step("no tool call here")
    assert obs.endswith("(invalid actions: 2 of 3 left)") and not truncated
    obs, *_ = env.step(call("no_such_tool"))
    assert obs.endswith("(invalid actions: 1 of 3 left)")
    obs, _, _, _, _ = env.step(call("list_files"))
    assert "invalid actions" not in obs
    obs, _, _, truncated, info = env.step(call("read_file"))
    assert truncated and info["stop_reason"] == "invalid_actions"
    assert "left)" not in obs


def test_tool_results_keep_the_tools_name(env):
    _, _, _, _, info = env.step({"name": "read_skill", "arguments": {"name": "workspace"}})
    assert info["tool_results"][0]["name"] == "read_skill"
    assert info["tool_results"][0]["skill"] == "workspace"
