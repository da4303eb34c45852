"""The driver is trusted code: a time-out of its own is an overloaded machine, retried once."""

import pytest

from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.tasks import builtin_task
from tests.solutions import write_kernel_only_solution


@pytest.mark.slow
def test_a_driver_that_runs_out_of_time_is_retried_once(tmp_path, monkeypatch):
    write_kernel_only_solution(tmp_path, "cpu")
    judge = Judge(JudgeConfig(device="cpu", baselines=("eager",), timed_runs=3))  # shared cache
    real = Judge._run_worker
    calls = []

    def first_driver_times_out(self, role, tmp, request, timeout_s, task=None):
        calls.append((role, timeout_s))
        if role == "candidate" and sum(r == "candidate" for r, _ in calls) == 1:
            return {
                "ok": False,
                "error": "The candidate process timed out",
                "timed_out": True,
                "stage": "compare",
                "result": {},
                "duration_s": timeout_s,
            }
        return real(self, role, tmp, request, timeout_s, task)

    monkeypatch.setattr(Judge, "_run_worker", first_driver_times_out)
    task = builtin_task("sigmoid_gated_multiply").for_device("cpu")
    verdict = judge.evaluate(task, tmp_path, timing=False)
    assert verdict.correct, verdict.error
    drivers = [t for r, t in calls if r == "candidate"]
    assert len(drivers) == 2 and drivers[1] == 2 * drivers[0]
    assert "timed out" in verdict.flags["driver_retried"]
