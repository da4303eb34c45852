import pytest

from cuda_gym.errors import TaskFormatError, UnknownTaskError
from cuda_gym.tasks import (
    builtin_task,
    builtin_task_ids,
    load_task,
    task_from_file,
    task_from_string,
)

SOURCE = '''"""Doubles the input."""
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

n = 1024
CPU_SIZES = {"n": 16}

def get_inputs():
    return [torch.randn(n)]

def get_init_inputs():
    return []
'''


def test_builtin_set_has_every_family():
    ids = builtin_task_ids()
    assert len(ids) >= 12
    for family in ("softmax", "norm", "linear", "matmul", "conv", "mlp", "sum", "max"):
        assert any(family in task_id for task_id in ids), family


@pytest.mark.parametrize("task_id", builtin_task_ids())
def test_every_builtin_task_specialises_for_both_devices(task_id):
    task = builtin_task(task_id)
    assert task.origin == "builtin" and task.description
    cpu, cuda = task.for_device("cpu"), task.for_device("cuda")
    assert "CPU_SIZES" not in cpu.source and "CPU_SIZES" not in cuda.source
    assert cpu.content_hash != cuda.content_hash
    namespace: dict = {}
    exec(compile(cpu.source, task_id, "exec"), namespace)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    out = model(*namespace["get_inputs"]())
    assert out.numel() > 0


def test_cpu_sizes_replace_only_the_named_constants():
    task = task_from_string(SOURCE, "double")
    cpu = task.for_device("cpu")
    assert "n = 16\n" in cpu.source and "n = 1024" not in cpu.source
    assert "CPU_SIZES" not in cpu.source
    cuda = task.for_device("cuda")
    assert "n = 1024\n" in cuda.source and "CPU_SIZES" not in cuda.source
    assert cpu.for_device("cpu") is cpu
    with pytest.raises(ValueError, match="already specialised"):
        cpu.for_device("cuda")


def test_content_hash_ignores_comments_and_blank_lines():
    a = task_from_string(SOURCE)
    b = task_from_string(SOURCE.replace("return x * 2", "return x * 2  # twice\n\n"))
    c = task_from_string(SOURCE.replace("x * 2", "x * 3"))
    assert a.content_hash == b.content_hash != c.content_hash
    assert len(a.content_hash) == 64


def test_loaders_agree(tmp_path):
    path = tmp_path / "double.py"
    path.write_text(SOURCE)
    from_file = task_from_file(path)
    assert from_file.task_id == "double" and from_file.origin == str(path)
    assert load_task(str(path)).content_hash == from_file.content_hash
    assert load_task(SOURCE).content_hash == from_file.content_hash
    assert load_task("row_softmax").task_id == "row_softmax"


def test_unknown_builtin_suggests_close_ids():
    with pytest.raises(UnknownTaskError, match="Did you mean 'row_softmax'"):
        builtin_task("row_sofmax")


def test_missing_kernelbench_parts_are_reported():
    with pytest.raises(TaskFormatError, match="missing get_inputs, get_init_inputs"):
        task_from_string("class Model: pass\n")
    with pytest.raises(TaskFormatError, match="not valid Python"):
        task_from_string("def (\n")


def test_judge_options_are_read_from_the_task():
    assert task_from_string(SOURCE).judge_options == {}
    opted = task_from_string(SOURCE + "\nJUDGE_OPTIONS = {'allow_vendor_libraries': True}\n")
    assert opted.judge_options == {"allow_vendor_libraries": True}
    assert opted.for_device("cpu").judge_options == {"allow_vendor_libraries": True}
    with pytest.raises(TaskFormatError, match="JUDGE_OPTIONS"):
        _ = task_from_string(SOURCE + "\nJUDGE_OPTIONS = {'fast': 1}\n").judge_options
