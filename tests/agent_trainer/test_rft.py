"""RFT: filtering trajectories, and token rows whose loss falls on the agent's tokens only.

The mask test plays a real runner episode with Qwen3's chat template (shipped in trl) and
feeds the SFT set through the dataset OpenRLHF's SFT CLI gets (token_sft.TokenSFTDataset).
"""

import asyncio
import json

import gymnasium as gym
import pytest

from agent_trainer.config import RunnerConfig
from agent_trainer.pipeline_config import RFTConfig
from agent_trainer.rft import write_sft_set
from agent_trainer.runner import run_token_episode
from agent_trainer.tiny import build_tiny_tokenizer
from agent_trainer.token_sft import TokenSFTDataset, token_row
from tests.agent_trainer.fakes import ScriptedModel


def traj(actions, reward=2.0, invalid=(), error=None, truncated=False):
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Task t"}]
    turns, ids, ranges = [], [1, 2, 3], []
    for i, action in enumerate(actions):
        messages += [{"role": "assistant", "content": action},
                     {"role": "user", "content": f"obs {i}"}]
        turns.append({"action": action, "observation": f"obs {i}",
                      "invalid_action": i in invalid, "parse_errors": []})
        ranges.append([len(ids), len(ids) + 2])
        ids += [10 + i, 20 + i, 7, 7]  # two action tokens, two feedback tokens
    return {"messages": messages, "turns": turns, "reward": reward, "error": error,
            "truncated": truncated, "token_ids": ids, "action_ranges": ranges}


GOOD = traj(["<tool_call>read</tool_call>", "write it", "<tool_call>submit</tool_call>"], 3.0)
TRAJECTORIES = [
    GOOD,
    traj(["a", "b"], reward=0.0),
    traj(["a", "b"], reward=-1.0),
    traj(["same", "same ", "same", "same", "x"]),
    traj(["bad json", "ok"], invalid={0}),
    traj(["a"], error="step: RuntimeError: lost"),
    traj(["a", "b"], reward=1.0, truncated=True),
]


def write(tmp_path, rows):
    path = tmp_path / "traj.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_filtering_keeps_positive_clean_trajectories(tmp_path):
    out = tmp_path / "sft.jsonl"
    report = write_sft_set([write(tmp_path, TRAJECTORIES)], out, RFTConfig(), 4096)
    assert report.read == 7 and report.kept == 2
    assert report.dropped == {"env_error": 1, "looping": 1, "low_reward": 2,
                              "malformed_tool_call": 1}
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows[0] == {"input_ids": GOOD["token_ids"], "action_ranges": GOOD["action_ranges"]}
    report = write_sft_set([write(tmp_path, TRAJECTORIES)], out,
                           RFTConfig(drop_truncated=True, max_repeats=4), 4096)
    assert report.kept == 2 and report.dropped["truncated"] == 1 and "looping" not in \
        report.dropped


def test_bad_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"t.jsonl:2"):
        write_sft_set([path], tmp_path / "o.jsonl", RFTConfig(), 4096)
    path.write_text(json.dumps({"messages": []}) + "\n")
    with pytest.raises(ValueError, match=r"t.jsonl:1: not a trajectory object with 'messages', "
                                         "'token_ids'"):
        write_sft_set([path], tmp_path / "o.jsonl", RFTConfig(), 4096)


def test_rows_are_cut_to_the_sft_length():
    # 3 prompt tokens, then actions [3, 5) and [7, 9): cut at 8 keeps one and a half actions.
    assert token_row(GOOD, 8) == {"input_ids": GOOD["token_ids"][:8],
                                  "action_ranges": [[3, 5], [7, 8]]}
    assert token_row(GOOD, 3) is None  # nothing of the model's within the length


ENV_ID = "AgentTrainerScriptedRft-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point="tests.agent_trainer.fakes:ScriptedEnv",
                 disable_env_checker=True)
REPLIES = [
    "<think>\nplan one: read the reference first\n</think>\n\n"
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "model.py"}}\n</tool_call>',
    "<think>\nplan two: looks fine\n</think>\n\n"
    '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>',
]


def test_loss_falls_on_the_agents_tokens_with_qwen3s_template(tmp_path):
    from trl.chat_template_utils import qwen3_chat_template

    tok = build_tiny_tokenizer()
    tok.chat_template = qwen3_chat_template
    env = gym.make(ENV_ID)
    model = ScriptedModel(tok, REPLIES, logprobs=False)
    episode = asyncio.run(run_token_episode(env, model, tok, RunnerConfig(max_turns=4)))
    assert episode.reward == 3.0 and len(episode.action_ranges) == 2
    path = tmp_path / "traj.jsonl"
    path.write_text(json.dumps(episode.to_json()) + "\n")
    out = tmp_path / "sft.jsonl"
    assert write_sft_set([path], out, RFTConfig(), 16384).kept == 1
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    dataset = TokenSFTDataset(rows, tok, 16384, None)
    input_ids, attention, loss_mask = dataset.collate_fn([dataset[0]])
    ids, mask = input_ids[0].tolist(), loss_mask[0].tolist()
    assert ids == episode.token_ids and attention.sum() == len(ids)
    # loss_mask[j] = 1 means token j+1 is a training target (OpenRLHF's shift).
    targets = [ids[j + 1] for j in range(len(ids) - 1) if mask[j]]
    expected = "".join(r + "<|im_end|>" for r in REPLIES)
    assert tok.decode(targets, skip_special_tokens=False) == expected
    text = tok.decode(ids, skip_special_tokens=False)
    assert "<|im_start|>user\nobs 1: ok<|im_end|>" in text  # feedback, not a target
    # Re-rendering the messages (what OpenRLHF's multi-turn SFT set does) loses turn 1's
    # reasoning under this template: the sampled tokens are not what it would train on.
    rendered = tok.apply_chat_template(episode.messages[:-1], tokenize=False)
    assert "plan one" in text and "plan one" not in rendered





def test_the_token_dataset_takes_openrlhfs_sft_call_and_a_datasets_table(tmp_path):
    import ast
    import importlib.util
    import inspect

    from datasets import Dataset

    spec = importlib.util.find_spec("openrlhf.cli.train_sft")
    if spec is None:
        pytest.skip("openrlhf is not installed")
    calls = [node for node in ast.walk(ast.parse(open(spec.origin).read()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "SFTDataset"]
    params = inspect.signature(TokenSFTDataset).parameters
    for node in calls:  # train_sft builds its train (and eval) set with these arguments
        assert len(node.args) <= 4 and {k.arg for k in node.keywords} <= set(params)
    rows = [token_row(GOOD, 4096), token_row(traj(["x"]), 4096)]
    dataset = TokenSFTDataset(Dataset.from_list(rows), build_tiny_tokenizer(), 9, None,
                              pretrain_mode=False, input_template=None, multiturn=False)
    ids, attention, loss = dataset.collate_fn([dataset[0], dataset[1]])
    assert ids.shape == attention.shape == loss.shape == (2, 9)
    assert attention[1].tolist() == [1] * 7 + [0] * 2  # the shorter row is right-padded
    assert loss[0].tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 0]
