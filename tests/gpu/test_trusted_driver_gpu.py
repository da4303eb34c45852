"""The trusted driver on a real GPU: CUDA IPC buffers, host-clock timing, profile cross-check.

Run with: python -m pytest -m gpu tests/gpu/test_trusted_driver_gpu.py -s
"""

import json

import pytest

from cuda_gym.judge import Judge, JudgeConfig, ViolationKind
from cuda_gym.tasks import builtin_task
from tests.solutions import TASK_ID, write_solution

pytestmark = pytest.mark.gpu

COUNTING_MODEL_NEW = """
import kernels_ext
import torch
import torch.nn as nn


def _schedule():
    for _ in range(6):
        yield True
    while True:
        yield False


class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.gate_bias = nn.Parameter(torch.empty(hidden_size))
        self.schedule = _schedule()

    def forward(self, x, gate):
        if next(self.schedule):
            return kernels_ext.gated_multiply(x, gate, self.gate_bias)
        return torch.empty_like(x)
"""


@pytest.fixture(scope="module")
def task():
    return builtin_task(TASK_ID).for_device("cuda")


def test_a_correct_kernel_is_timed_by_the_driver_through_cuda_ipc(task, tmp_path):
    judge = Judge(JudgeConfig(device="cuda", cache_dir=tmp_path / "cache"))
    verdict = judge.evaluate(task, write_solution(tmp_path / "s", "cuda", "correct"), profile=True)
    assert verdict.correct, verdict.error
    timing = verdict.flags["candidate_timing"]
    assert timing["median_ms"] > 0 and timing["rechecked_calls"] >= 2
    assert not timing["side_work"], timing
    assert verdict.checks["timing_recheck"] is True and verdict.checks["own_kernels"] is True
    assert "profile_mismatch" not in verdict.flags
    assert verdict.time_ms["eager"] > 0 and verdict.time_ms["compile"] > 0
    print(
        json.dumps(
            {
                "timing": timing,
                "time_ms": verdict.time_ms,
                "flags": {
                    k: verdict.flags.get(k) for k in ("kernels", "profile_kernel_ms_per_call")
                },
            }
        )
    )


def test_skipping_work_after_the_correctness_calls_is_caught(task, tmp_path):
    root = write_solution(tmp_path / "s", "cuda", "correct")
    (root / "model_new.py").write_text(COUNTING_MODEL_NEW)
    verdict = Judge(JudgeConfig(device="cuda", cache_dir=tmp_path / "cache")).evaluate(task, root)
    assert not verdict.correct
    assert verdict.has_violation(ViolationKind.TIMING_RECHECK), verdict.violations
