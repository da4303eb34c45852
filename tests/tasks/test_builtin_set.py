"""The shipped synthesised set: its size, provenance and filter results; every task runs on CPU."""

import types

import pytest
import torch

from cuda_gym.synth.filters import WORKER_FILTERS
from cuda_gym.tasks import load_builtin_set
from cuda_gym.tasks.sources import builtin_set_available

pytestmark = pytest.mark.skipif(not builtin_set_available(), reason="no built-in set shipped")

REQUIRED_FILTERS = ("stochastic_op", *WORKER_FILTERS)  # every worker filter, on the GPU


def test_the_set_is_large_split_and_generated_on_the_gpu():
    tasks = load_builtin_set()
    assert len(tasks) >= 500
    assert len(set(tasks.ids())) == len(tasks)
    splits = {tasks.meta[i]["split"] for i in tasks.ids()}
    assert splits == {"train", "validation"}
    assert 0 < len(load_builtin_set("validation")) < len(load_builtin_set("train"))


def test_every_task_passed_every_filter_on_the_gpu_within_its_window():
    tasks = load_builtin_set()
    for task_id in tasks.ids():
        prov = tasks.meta[task_id]["provenance"]
        assert prov["device"] == "cuda" and prov["device_name"] == "NVIDIA H200", task_id
        assert prov["torch"] and prov["cuda"] and prov["seed"] is not None
        low, high = prov["window_ms"]
        assert low <= prov["eager_ms"] <= high, task_id
        assert prov["compile_ms"] > 0 and prov["compile_checked"], task_id
        for name in REQUIRED_FILTERS:
            assert prov["filters"][name]["passed"], (task_id, name)
        # The trivial answers (zeros, constants, the input, the mean) fail in every mode.
        assert not prov["filters"]["trivial_answers"]["passing_answers"], task_id


@pytest.mark.slow
def test_every_task_loads_and_runs_at_its_cpu_sizes():
    tasks = load_builtin_set()
    for task in tasks:
        module = types.ModuleType(task.task_id)
        exec(compile(task.for_device("cpu").source, task.task_id, "exec"), module.__dict__)
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
        with torch.no_grad():
            out = model(*module.get_inputs())
        outs = out if isinstance(out, (tuple, list)) else [out]
        assert all(isinstance(o, torch.Tensor) for o in outs), task.task_id
