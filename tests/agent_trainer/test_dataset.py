"""Prompt datasets from cuda_gym task sources."""

import json

import pytest

from agent_trainer.dataset import (
    TaskDirectory,
    dataset_rows,
    parse_label,
    source_from_spec,
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


def test_directory_source_labels_carry_the_file(tmp_path):
    (tmp_path / "my_task.py").write_text(builtin_task("row_softmax").source)
    rows = dataset_rows([TaskDirectory(tmp_path)])
    (label,) = [json.loads(r["label"]) for r in rows]
    assert label["task"] == str(tmp_path / "my_task.py") and label["task_id"] == "my_task"
    assert parse_label(rows[0]["label"])[0] == {"task_id": "my_task",
                                                "task": str(tmp_path / "my_task.py")}


def test_bad_sources_and_duplicates_raise(tmp_path):
    with pytest.raises(ValueError, match="Unknown task source"):
        source_from_spec("kernelbench")
    with pytest.raises(ValueError, match="not found"):
        source_from_spec(f"dir:{tmp_path / 'nope'}")
    (tmp_path / "row_softmax.py").write_text(builtin_task("row_softmax").source)
    with pytest.raises(ValueError, match="comes from both"):
        dataset_rows([source_from_spec("builtin"), TaskDirectory(tmp_path)])
    with pytest.raises(ValueError, match="not found in the sources"):
        dataset_rows([source_from_spec("builtin")], include=["nope"])


def test_include_filters_tasks():
    rows = dataset_rows([source_from_spec("builtin")], include=["row_softmax", "rms_norm"])
    assert sorted(json.loads(r["label"])["task_id"] for r in rows) == ["rms_norm", "row_softmax"]
