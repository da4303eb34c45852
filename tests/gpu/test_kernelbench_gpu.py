"""The KernelBench harness on the GPU: the sanity run and a KernelBench-style CUDA solution."""

import json

import pytest

from benchmarks.kernelbench.__main__ import main
from tests.kernelbench.tiny_kernelbench import (
    RELU_LOAD_INLINE_CUDA,
    write_kernelbench,
    write_tree,
)

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

FLAGS = ["--device", "cuda", "--timed-runs", "20", "--no-plots"]


def test_reference_as_solution_passes_every_problem(tmp_path):
    kb = write_kernelbench(tmp_path / "kb")
    out = tmp_path / "out"
    argv = ["--kernelbench-dir", str(kb), "--levels", "1,2", "--out", str(out), *FLAGS]
    assert main([*argv, "--reference-as-solution"]) == 0
    report = json.loads((out / "report.json").read_text())
    overall = report["metrics"]["overall"]
    assert overall["n"] == 5 and overall["pass_rate"] == 1.0
    assert overall["timed_correct_vs_eager"] == 5 and overall["timed_correct_vs_compile"] == 5
    assert report["system"]["device"]["device"] == "cuda"


def test_kernelbench_style_cuda_load_inline_solution_is_judged(tmp_path):
    kb = write_kernelbench(tmp_path / "kb")
    sols = write_tree(tmp_path / "sols", {"level1/1_ReLU.py": RELU_LOAD_INLINE_CUDA})
    out = tmp_path / "out"
    argv = ["--kernelbench-dir", str(kb), "--levels", "1", "--problems", "1", "--out", str(out)]
    assert main([*argv, *FLAGS, "--solutions-dir", str(sols)]) == 0
    record = json.loads((out / "records/level1/1_ReLU.json").read_text())
    assert record["correct"], record["error"]
    assert record["speedup_vs_eager"] > 0 and record["speedup_vs_compile"] > 0
