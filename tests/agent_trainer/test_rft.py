"""RFT: filtering hand-made trajectories and the SFT set's loss masks under OpenRLHF's dataset."""

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent_trainer.pipeline_config import RFTConfig
from agent_trainer.rft import write_sft_set
from agent_trainer.tiny import build_tiny_tokenizer


def traj(actions, reward=2.0, invalid=(), error=None, truncated=False):
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Task t"}]
    turns = []
    for i, action in enumerate(actions):
        messages += [{"role": "assistant", "content": action},
                     {"role": "user", "content": f"obs {i}"}]
        turns.append({"action": action, "observation": f"obs {i}",
                      "invalid_action": i in invalid, "parse_errors": []})
    return {"messages": messages, "turns": turns, "reward": reward, "error": error,
            "truncated": truncated}


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
    report = write_sft_set([write(tmp_path, TRAJECTORIES)], out, RFTConfig())
    assert report.read == 7 and report.kept == 2
    assert report.dropped == {"env_error": 1, "looping": 1, "low_reward": 2,
                              "malformed_tool_call": 1}
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows[0]["messages"] == GOOD["messages"][:-1]  # ends with the last assistant turn
    assert rows[0]["messages"][-1]["role"] == "assistant"
    report = write_sft_set([write(tmp_path, TRAJECTORIES)], out,
                           RFTConfig(drop_truncated=True, max_repeats=4))
    assert report.kept == 2 and report.dropped["truncated"] == 1 and "looping" not in \
        report.dropped


def test_bad_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"t.jsonl:2"):
        write_sft_set([path], tmp_path / "o.jsonl", RFTConfig())


class Table:
    """The two `datasets.Dataset` methods SFTDataset calls, over a list of rows."""

    def __init__(self, rows):
        self.rows = rows
        self.column_names = sorted(rows[0]) if rows else []

    def map(self, fn, remove_columns=None, num_proc=None):
        return Table([fn(dict(r)) for r in self.rows])

    def filter(self, fn):
        return Table([r for r in self.rows if fn(r)])

    def __getitem__(self, key):
        return [r[key] for r in self.rows]


def openrlhf_sft_dataset():
    import openrlhf

    path = Path(openrlhf.__file__).parent / "datasets" / "sft_dataset.py"
    spec = importlib.util.spec_from_file_location("_openrlhf_sft_dataset", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SFTDataset


def test_sft_set_loss_masks_cover_only_assistant_tokens(tmp_path):
    out = tmp_path / "sft.jsonl"
    write_sft_set([write(tmp_path, TRAJECTORIES)], out, RFTConfig())
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    tok = build_tiny_tokenizer()
    # The flags our SFT command passes: --data.multiturn --data.apply_chat_template
    # --data.input_key messages.
    data_args = SimpleNamespace(input_key="messages", output_key=None, apply_chat_template=True)
    strategy = SimpleNamespace(args=SimpleNamespace(data=data_args))
    dataset = openrlhf_sft_dataset()(Table(rows), tok, 4096, strategy, multiturn=True,
                                     num_processors=1)
    assert len(dataset) == 2
    for i, row in enumerate(rows):
        input_ids, _, loss_mask = dataset[i]
        ids, mask = input_ids[0].tolist(), loss_mask[0].tolist()
        # loss_mask[j] = 1 means token j+1 is a training target.
        targets = [ids[j + 1] for j in range(len(ids) - 1) if mask[j]]
        assistant = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        expected = "".join(f"{a}<|im_end|>\n" for a in assistant).removesuffix("\n")
        assert tok.decode(targets, skip_special_tokens=False) == expected
        assert "obs" not in tok.decode(targets) and "Task t" not in tok.decode(targets)
