"""Episodes of the scripted, replay and chat agents, and their JSONL trajectories (no judging)."""

import gymnasium as gym
import pytest

import cuda_gym  # noqa: F401 - registers the env
from cuda_gym.agents import (
    ChatAgentConfig,
    OpenAIChatAgent,
    ReplayAgent,
    ScriptedAgent,
    TrajectoryError,
    read_trajectory,
    run_episode,
)
from cuda_gym.agents.scripted import tool_call_text
from tests.agents.chat_server import ChatServer, completion, conversation_errors, tool_call

TASK = "sigmoid_gated_multiply"


@pytest.fixture
def env():
    # Two turns and no judging on truncation: the episodes below never build or run kernels.
    env = gym.make(
        "cuda_gym:CudaKernel-v0", device="cpu", task=TASK, max_turns=2, judge_on_truncation=False
    )
    yield env
    env.close()


def test_scripted_episode_writes_a_trajectory_that_replays(env, tmp_path):
    agent = ScriptedAgent.for_files({"model_new.py": "import torch\n"}, label="x", run=False)
    path = tmp_path / "traj.jsonl"
    result = run_episode(env, agent, seed=3, trajectory_path=path)
    assert result.turns == 2 and result.stop_reason == "max_turns" and result.reward == 0.0
    records = read_trajectory(path)
    assert [r["type"] for r in records] == ["reset", "step", "step", "end"]
    assert records[0]["info"]["task_id"] == TASK and records[0]["agent"]["agent"] == "scripted"
    first, second = records[1], records[2]
    assert first["info"]["tool_calls"][0]["name"] == "read_file"
    assert "class Model" in first["observation"]
    written = second["info"]["tool_results"][0]
    assert written["name"] == "write_file" and written["ok"] and not written["invalid"]
    assert second["truncated"] and records[3]["stop_reason"] == "max_turns"

    replay = run_episode(env, ReplayAgent(path), seed=3, trajectory_path=tmp_path / "re.jsonl")
    again = read_trajectory(tmp_path / "re.jsonl")
    assert replay.turns == 2
    assert [r["observation"] for r in again[1:3]] == [first["observation"], second["observation"]]


def test_replay_stops_with_an_agent_error_when_the_trajectory_runs_out(env, tmp_path):
    path = tmp_path / "short.jsonl"
    run_episode(env, ScriptedAgent([tool_call_text("list_files")] * 2), trajectory_path=path)
    lines = path.read_text().splitlines()
    (tmp_path / "cut.jsonl").write_text("\n".join(lines[:2]) + "\n")  # reset + one step
    result = run_episode(env, ReplayAgent(tmp_path / "cut.jsonl"))
    assert result.stop_reason == "agent_error" and result.turns == 1
    assert "only 1 steps" in result.error


def test_bad_trajectory_files_are_refused(tmp_path):
    with pytest.raises(TrajectoryError, match="not found"):
        ReplayAgent(tmp_path / "none.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"type": "step"}\n')
    with pytest.raises(TrajectoryError, match="does not start with a reset"):
        ReplayAgent(tmp_path / "bad.jsonl")


@pytest.mark.parametrize("tool_mode", ["native", "text"])
def test_chat_agent_episode_records_messages_and_tokens(env, tmp_path, tool_mode):
    def respond(body):
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        errors = conversation_errors(body["messages"])
        if errors:
            return 400, {"error": {"message": "; ".join(errors)}}
        if tool_mode == "text":
            return 200, completion(content=tool_call_text("read_file", path="model.py"))
        return 200, completion(tool_calls=[tool_call(f"call{turn}", "list_files")])

    with ChatServer(respond) as server:
        cfg = ChatAgentConfig(model="m", base_url=server.base_url, tool_mode=tool_mode)
        path = tmp_path / "chat.jsonl"
        result = run_episode(env, OpenAIChatAgent(cfg), trajectory_path=path)
    assert result.error is None and result.turns == 2
    assert result.usage == {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220}
    assert ("tools" in server.requests[0]) == (tool_mode == "native")
    second = server.requests[1]["messages"]
    assert second[-1]["role"] == ("tool" if tool_mode == "native" else "user")
    records = read_trajectory(path)
    conversation = records[-1]["messages"]
    assert conversation[0]["role"] == "system" and conversation[-1]["role"] == "assistant"
    assert sum(m["role"] == "assistant" for m in conversation) == 2
    steps = [r for r in records if r["type"] == "step"]
    assert steps[0]["usage"]["total_tokens"] == 110
    assert steps[0]["message"]["role"] == "assistant"
    if tool_mode == "native":
        assert steps[0]["tool_messages"][0]["tool_call_id"] == "call0"


def test_scripted_agent_reuses_the_demo_script_and_submits_when_done():
    from cuda_gym.demo import scripted_actions

    agent = ScriptedAgent.demo("cpu")
    assert agent.actions == scripted_actions("cpu")
    agent.reset("", {})
    replies = [agent.act().action for _ in range(len(agent.actions) + 1)]
    assert replies[:-1] == scripted_actions("cpu")
    assert '"submit"' in replies[-1]
