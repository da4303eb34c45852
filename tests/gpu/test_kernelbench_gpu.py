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
    why = _baseline_errors(out)
    assert overall["timed_correct_vs_eager"] == 5, why
    assert overall["timed_correct_vs_compile"] == 5, why
    assert report["system"]["device"]["device"] == "cuda"


def test_kernelbench_style_cuda_load_inline_solution_is_judged(tmp_path):
    kb = write_kernelbench(tmp_path / "kb")
    sols = write_tree(tmp_path / "sols", {"level1/1_ReLU.py": RELU_LOAD_INLINE_CUDA})
    out = tmp_path / "out"
    argv = ["--kernelbench-dir", str(kb), "--levels", "1", "--problems", "1", "--out", str(out)]
    assert main([*argv, *FLAGS, "--solutions-dir", str(sols)]) == 0
    record = json.loads((out / "records/level1/1_ReLU.json").read_text())
    assert record["correct"], record["error"]
    why = _baseline_errors(out)
    assert record["speedup_vs_eager"] is not None and record["speedup_vs_eager"] > 0, why
    assert record["speedup_vs_compile"] is not None and record["speedup_vs_compile"] > 0, why


def _baseline_errors(out) -> dict:
    """Why baselines could not be timed, by problem (what a failed assertion shows)."""
    errors = {}
    for path in sorted((out / "records").rglob("*.json")):
        flags = (json.loads(path.read_text()).get("verdict") or {}).get("flags") or {}
        if flags.get("baseline_errors"):
            errors[path.stem] = flags["baseline_errors"]
    return errors
