"""The trusted driver and its untrusted runner, end to end on the CPU (builds C++: slow)."""

import subprocess

import pytest

from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.judge.untrusted import RUNNER_PATH
from cuda_gym.tasks import builtin_task
from tests.solutions import TASK_ID, write_solution

pytestmark = pytest.mark.slow

# Raises at construction if anything of the judge is importable from the candidate's process.
SNOOPING_MODEL_NEW = '''
import typing

import kernels_ext
import torch
import torch.nn as nn

_JUDGE = sorted(m for m in typing.sys.modules if m.split(".")[0] == "cuda_gym")
_TASK = sorted(m for m in typing.sys.modules if m in ("reference_task", "model"))


class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        if _JUDGE or _TASK:
            raise RuntimeError(f"found in the candidate's process: {_JUDGE + _TASK}")
        self.gate_bias = nn.Parameter(torch.empty(hidden_size))

    def forward(self, x, gate):
        return kernels_ext.gated_multiply(x, gate, self.gate_bias)
'''


@pytest.fixture
def task():
    return builtin_task(TASK_ID).for_device("cpu")


def test_the_candidates_process_holds_no_judge_module_and_is_timed_by_the_driver(task, tmp_path):
    root = write_solution(tmp_path / "solution", "cpu", "correct")
    (root / "model_new.py").write_text(SNOOPING_MODEL_NEW)
    judge = Judge(JudgeConfig(device="cpu", cache_dir=tmp_path / "cache", baselines=("eager",)))
    verdict = judge.evaluate(task, root)
    assert verdict.correct, verdict.error
    timing = verdict.flags["candidate_timing"]
    assert timing["runs"] >= judge.config.timed_runs and timing["rechecked_calls"] >= 2
    assert timing["round_trip_ms"] > 0 and verdict.time_ms["eager"] > 0
    assert verdict.checks["timing_recheck"] is True


def runners() -> set[str]:
    found = subprocess.run(["pgrep", "-f", str(RUNNER_PATH)], capture_output=True, text=True)
    return set(found.stdout.split())


def test_a_hanging_candidate_leaves_no_process_behind(task, tmp_path):
    root = write_solution(tmp_path / "solution", "cpu", "spin")
    config = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache", run_timeout_s=20)
    before = runners()
    verdict = Judge(config).evaluate(task, root, timing=False)
    assert not verdict.correct and "timed out" in verdict.error
    assert runners() - before == set()
