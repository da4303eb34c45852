"""`cuda-gym play` against a local OpenAI-compatible fake endpoint: trajectories and summaries."""

import json

import pytest

from cuda_gym.agents import read_trajectory
from cuda_gym.agents.play import PlayConfig, episode_tasks
from cuda_gym.cli import main
from cuda_gym.errors import ConfigError
from tests.agents.chat_server import ChatServer, completion, tool_call


def scripted(body):
    """Write a model_new.py with a syntax error, then submit: judged at once, nothing compiled."""
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turn == 0:
        call = tool_call("c0", "write_file", path="model_new.py", content="class ModelNew(:\n")
    else:
        call = tool_call("c1", "submit")
    return 200, completion(tool_calls=[call])


def test_play_writes_trajectories_and_a_summary(tmp_path, capsys):
    out = tmp_path / "run"
    with ChatServer(scripted) as server:
        code = main(
            [
                "play",
                "--base-url",
                server.base_url,
                "--model",
                "fake-model",
                "--tasks",
                "builtin",
                "--episodes",
                "2",
                "--out",
                str(out),
                "--device",
                "cpu",
                "--no-progress",
            ]
        )
    assert code == 0
    assert {r["model"] for r in server.requests} == {"fake-model"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["totals"]["episodes"] == 2 and summary["totals"]["errors"] == 0
    # The broken model_new.py is rejected by the static checks: no worker, no compiler.
    assert [r["reward"] for r in summary["rows"]] == [-1.0, -1.0]
    assert all(r["stop_reason"] == "submit" and r["turns"] == 2 for r in summary["rows"])
    assert summary["totals"]["total_tokens"] == 4 * 110
    files = sorted((out / "trajectories").iterdir())
    assert len(files) == 2 and files[0].name.startswith("0000_")
    records = read_trajectory(files[0])
    assert [r["type"] for r in records] == ["reset", "step", "step", "end"]
    assert records[0]["info"]["task_id"] == summary["rows"][0]["task_id"]
    table = (out / "summary.md").read_text()
    assert table.startswith("| episode | task_id | reward |")
    assert "2 episodes of fake-model: mean reward -1, 0 correct, 0 errors" in table
    assert capsys.readouterr().out.startswith("| episode | task_id |")


def test_an_unreachable_endpoint_is_an_agent_error_and_exit_1(tmp_path):
    code = main(
        [
            "play",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--task",
            "row_softmax",
            "--episodes",
            "1",
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
            "--no-progress",
            "--max-turns",
            "2",
            "--max-retries",
            "0",
        ]
    )
    assert code == 1
    row = json.loads((tmp_path / "summary.json").read_text())["rows"][0]
    assert row["stop_reason"] == "agent_error" and row["error"]


def test_play_config_is_validated_and_orders_tasks_by_seed():
    with pytest.raises(ConfigError, match="exactly one of task"):
        PlayConfig(base_url="u", model="m", out="o")
    with pytest.raises(ConfigError, match="episodes must be at least 1"):
        PlayConfig(base_url="u", model="m", out="o", task="row_softmax", episodes=0)
    with pytest.raises(ConfigError, match="source names where --task is found"):
        PlayConfig(base_url="u", model="m", out="o", tasks="builtin", source="builtin")
    one = PlayConfig(base_url="u", model="m", out="o", task="row_softmax", source="builtin")
    assert [t.task_id for t in episode_tasks(one)] == ["row_softmax"]
    config = PlayConfig(base_url="u", model="m", out="o", tasks="builtin", episodes=20)
    ids = [t.task_id for t in episode_tasks(config)]
    assert len(set(ids[:16])) == 16 and ids[16:] == ids[:4]
    assert ids == [t.task_id for t in episode_tasks(config)]
