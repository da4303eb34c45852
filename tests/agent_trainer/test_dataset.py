"""Prompt datasets from cuda_gym task sources."""

import json

import pytest

from agent_trainer.dataset import (
    dataset_rows,
    parse_label,
    source_from_spec,
    task_splits,
    write_dataset,
)
from cuda_gym import builtin_task_ids
from cuda_gym.tasks import builtin_task


def test_builtin_rows_name_every_task_and_round_trip_through_the_executor(tmp_path):
    rows = dataset_rows([source_from_spec("builtin")], repeat=2, seed=1)
    ids = builtin_task_ids()
    assert len(rows) == 2 * len(ids)
    labels = [json.loads(r["label"]) for r in rows]
    assert sorted({lab["task_id"] for lab in labels}) == ids
    assert all(r["prompt"].startswith(f"Task {lab['task_id']}") for r, lab in zip(rows, labels))
    options, seed = parse_label(rows[0]["label"])
    assert options == {"task_id": labels[0]["task_id"]} and seed == labels[0]["seed"]
    assert dataset_rows([source_from_spec("builtin")], repeat=2, seed=1) == rows
    path = write_dataset(rows, tmp_path / "d" / "tasks.jsonl")
    assert [json.loads(x) for x in path.read_text().splitlines()] == rows


def test_directory_source_labels_carry_the_task_text(tmp_path):
    source = builtin_task("row_softmax").source
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "my_task.py").write_text(source)
    rows = dataset_rows([source_from_spec(f"dir:{tmp_path}")])
    (label,) = [json.loads(r["label"]) for r in rows]
    assert label["task"] == source and label["task_id"] == "sub/my_task"
    # The text wins over the id, which names the task only within its source.
    assert parse_label(rows[0]["label"])[0] == {"task": source}


def test_bad_sources_and_duplicates_raise(tmp_path):
    with pytest.raises(ValueError, match="Unknown task source"):
        source_from_spec("kernel-bench")
    with pytest.raises(ValueError, match="use kernelbench:PATH:LEVEL"):
        source_from_spec("kernelbench")
    with pytest.raises(ValueError, match="level must be 1-4"):
        source_from_spec(f"kernelbench:{tmp_path}:7")
    for spec in ("dir", "parquet", "ops6k", "kernelbench"):
        with pytest.raises(ValueError, match="not found"):
            source_from_spec(f"{spec}:{tmp_path / 'nope'}" + (":1" if spec == "kernelbench"
                                                              else ""))
    (tmp_path / "row_softmax.py").write_text(builtin_task("row_softmax").source)
    with pytest.raises(ValueError, match="comes from both"):
        dataset_rows([source_from_spec("builtin"), source_from_spec(f"dir:{tmp_path}")])
    with pytest.raises(ValueError, match="not found in the sources"):
        dataset_rows([source_from_spec("builtin")], include=["nope"])


def test_include_filters_tasks():
    rows = dataset_rows([source_from_spec("builtin")], include=["row_softmax", "rms_norm"])
    assert sorted(json.loads(r["label"])["task_id"] for r in rows) == ["rms_norm", "row_softmax"]


def test_synthesised_set_splits_and_the_held_out_check():
    splits = task_splits(["synth"], ["builtin"])
    assert len(splits.train) == 515 and len(splits.validation) == 45 + len(builtin_task_ids())
    assert all(e.split == "train" for e in splits.train)
    label = json.loads(dataset_rows([source_from_spec("synth:validation")])[0]["label"])
    assert "class Model" in label["task"] and label["source"] == "synth:validation"
    with pytest.raises(ValueError, match="evaluation tasks are also training tasks"):
        task_splits(["synth:train"], eval_sources=["synth"])
    fraction = task_splits(["builtin"], validation_fraction=0.5, seed=3)
    assert fraction.train and fraction.validation
    assert len(fraction.train) + len(fraction.validation) == len(builtin_task_ids())
    assert task_splits(["builtin"], validation_fraction=0.5, seed=3) == fraction


def test_parquet_kernelbench_and_ops6k_sources(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = builtin_task("row_softmax").source
    pq.write_table(pa.table({"problem_id": [7, 8], "code": [source, source + "\n"]}),
                   tmp_path / "ops.parquet")
    for spec in (f"parquet:{tmp_path / 'ops.parquet'}", f"ops6k:{tmp_path / 'ops.parquet'}"):
        rows = dataset_rows([source_from_spec(spec)])
        assert sorted(json.loads(r["label"])["task_id"] for r in rows) == ["7", "8"]
    level = tmp_path / "KernelBench" / "level2"
    level.mkdir(parents=True)
    (level / "3_Softmax.py").write_text(source)
    (label,) = [json.loads(r["label"]) for r in
                dataset_rows([source_from_spec(f"kernelbench:{tmp_path}:2")])]
    assert label["task_id"] == "level2/3_Softmax" and label["task"] == source
    # The evaluation set must be held out: the same text under another id is refused.
    with pytest.raises(ValueError, match=r"level2/3_Softmax \(= 7\)"):
        task_splits([f"parquet:{tmp_path / 'ops.parquet'}"],
                    eval_sources=[f"kernelbench:{tmp_path}:2"])
