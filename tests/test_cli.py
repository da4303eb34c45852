"""Smoke tests of the `cuda-gym` command line, run as a user would."""

import json
import subprocess
import sys

import pytest

from cuda_gym.cli import main
from cuda_gym.demo import CPU_KERNEL
from cuda_gym.tasks import builtin_task
from tests.solutions import TASK_ID


def run_cli(*args, timeout=900):
    return subprocess.run(
        [sys.executable, "-m", "cuda_gym.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_tasks_list_json(capsys):
    assert main(["tasks", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) >= 12
    assert {"task_id", "description", "hash"} <= set(rows[0])


@pytest.mark.slow
def test_demo_json_on_the_cpu():
    out = run_cli("demo", "--device", "cpu", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["reward"] >= 1 and result["correct"] is True
    assert result["stop_reason"] == "submit" and result["turns"] == 9
    assert result["speedup_vs_eager"] > 0 and result["speedup_vs_compile"] > 0


def test_demo_refuses_tasks_it_has_no_solution_for(capsys):
    assert main(["demo", "--device", "cpu", "--task", "row_softmax"]) == 2
    assert "scripted demo agent" in capsys.readouterr().err


INLINE_SOLUTION = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
{source}
"""

ext = load_inline(name="gated_inline", cpp_sources=SOURCE, functions=["gated_multiply"],
                  extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.gate_bias = nn.Parameter(torch.empty(hidden_size))

    def forward(self, x, gate):
        return ext.gated_multiply(x, gate, self.gate_bias)
'''


@pytest.mark.slow
def test_judge_a_kernelbench_load_inline_solution(tmp_path):
    source = CPU_KERNEL.split("PYBIND11_MODULE")[0].replace(
        "#include <torch/csrc/utils/pybind.h>", "#include <torch/extension.h>"
    )
    task_file = tmp_path / "task.py"
    task_file.write_text(builtin_task(TASK_ID).for_device("cpu").source)
    solution = tmp_path / "solution.py"
    solution.write_text(INLINE_SOLUTION.replace("{source}", source))
    out = run_cli("judge", str(task_file), str(solution), "--device", "cpu", "--json")
    assert out.returncode == 0, out.stderr
    verdict = json.loads(out.stdout)
    assert verdict["compiled"] is True and verdict["correct"] is True
    assert verdict["verdict"] == "accept" and verdict["reward"] >= 1
    assert set(verdict["time_ms"]) == {"candidate", "eager", "compile"}
    assert verdict["violations"] == [] and verdict["error"] is None

    broken = tmp_path / "broken.py"
    broken.write_text(INLINE_SOLUTION.replace("{source}", "int f( {"))
    out = run_cli("judge", str(task_file), str(broken), "--device", "cpu", "--json", "--no-timing")
    verdict = json.loads(out.stdout)
    assert verdict["compiled"] is False and verdict["verdict"] == "reject"
    assert verdict["reward"] == -1 and "error" in verdict["error"].lower()
