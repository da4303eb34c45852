import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cuda_gym.config import EnvConfig
from cuda_gym.errors import DataUnavailableError, UnknownTaskError
from cuda_gym.tasks import (
    builtin_set_available,
    builtin_task,
    builtin_task_ids,
    load_builtin_set,
    load_kernelbench,
    load_kernelbench_hf,
    load_ops6k,
    load_task_dir,
    load_task_parquet,
    resolve_task_source,
)

RELU = builtin_task("row_softmax").source


def test_task_directory_skips_files_that_are_not_tasks(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text(RELU)
    (tmp_path / "sub" / "b.py").write_text(RELU)
    (tmp_path / "helper.py").write_text("x = 1\n")
    tasks = load_task_dir(tmp_path)
    assert tasks.ids() == ["a", "sub/b"]
    assert len(tasks.skipped) == 1 and "helper.py" in tasks.skipped[0]
    with pytest.raises(UnknownTaskError, match="Did you mean 'a'"):
        tasks.get("aa")


def test_kernelbench_checkout_keeps_ids_and_names(tmp_path):
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for name in ("19_ReLU.py", "2_Standard_matrix_multiplication_.py", "100_HingeLoss.py"):
        (level / name).write_text(RELU)
    tasks = load_kernelbench(tmp_path, level="level1")
    assert tasks.ids() == [
        "level1/2_Standard_matrix_multiplication_",
        "level1/19_ReLU",
        "level1/100_HingeLoss",
    ]
    assert tasks.meta["level1/19_ReLU"] == {
        "level": 1,
        "problem_id": 19,
        "name": "ReLU",
        "path": str(level / "19_ReLU.py"),
    }
    assert load_kernelbench(tmp_path / "KernelBench", 1).ids() == tasks.ids()
    with pytest.raises(FileNotFoundError, match="level2"):
        load_kernelbench(tmp_path, 2)
    with pytest.raises(ValueError, match="level"):
        load_kernelbench(tmp_path, 7)


def test_parquet_layouts_kernelbench_and_unknown_columns(tmp_path):
    kb = tmp_path / "kb.parquet"
    pq.write_table(
        pa.table(
            {
                "code": [RELU, RELU],
                "level": [1, 1],
                "name": ["ReLU", "Tanh"],
                "problem_id": [19, 22],
            }
        ),
        kb,
    )
    assert load_task_parquet(kb).ids() == ["level1/19_ReLU", "level1/22_Tanh"]
    ops = tmp_path / "ops.parquet"
    pq.write_table(
        pa.table({"uid": ["op_a", "op_b", "op_c"], "module_text": [RELU, RELU, "not a task"]}), ops
    )
    tasks = load_ops6k(ops)
    assert tasks.ids() == ["op_a", "op_b"] and len(tasks.skipped) == 1
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"a": ["x"]}), bad)
    with pytest.raises(DataUnavailableError, match="no column holding task code"):
        load_task_parquet(bad)


def test_online_sources_fail_clearly_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataUnavailableError, match="load_ops6k\\(PATH\\)"):
        load_ops6k(cache_dir=tmp_path)
    with pytest.raises(DataUnavailableError, match="load_kernelbench\\(PATH, level\\)"):
        load_kernelbench_hf(1, cache_dir=tmp_path)


def test_task_sources_for_the_env():
    assert resolve_task_source("builtin").ids() == builtin_task_ids()
    auto = resolve_task_source("auto")
    if builtin_set_available():
        full = load_builtin_set()
        assert auto.ids() == full.ids() and len(full) >= 1
        train = load_builtin_set("train")
        assert 0 < len(train) <= len(full)
        prov = full.meta[full.ids()[0]]["provenance"]
        assert prov["generator"] == "cuda_gym.synth" and prov["device"] in ("cpu", "cuda")
    else:
        assert auto.ids() == builtin_task_ids()
    with pytest.raises(DataUnavailableError, match="task source"):
        resolve_task_source("no/such/place")
    assert EnvConfig(task_source="builtin").task_source == "builtin"


def test_auto_source_skips_a_cpu_sized_set_on_the_gpu():
    from cuda_gym.tasks import builtin_task_ids
    from cuda_gym.tasks.sources import builtin_set_available, resolve_task_source

    on_cpu = resolve_task_source("auto", "cpu")
    on_gpu = resolve_task_source("auto", "cuda")
    shipped_devices = {m.get("device") for m in on_cpu.meta.values()}
    if builtin_set_available() and "cuda" not in shipped_devices:
        assert sorted(t.task_id for t in on_gpu.tasks) == sorted(builtin_task_ids())
    assert len(on_cpu.tasks) >= len(builtin_task_ids())
