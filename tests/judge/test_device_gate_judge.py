"""Judge workers time only while they hold their device's gate alone, and the wait is not
counted against their time limit."""

import threading
import time
from pathlib import Path

import pytest

from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.runtime.device_gate import DeviceGate
from cuda_gym.tasks import builtin_task
from tests.solutions import write_kernel_only_solution

pytestmark = pytest.mark.slow


def gated_judge(tmp_path, monkeypatch, **config) -> tuple[Judge, Path]:
    """A CPU judge whose workers use a gate directory of the test's own; a solution."""
    gates = tmp_path / "gates"
    monkeypatch.setenv("CUDA_GYM_GATE_DIR", str(gates))  # the workers inherit it
    write_kernel_only_solution(tmp_path, "cpu")
    cfg = JudgeConfig(device="cpu", baselines=("eager",), timed_runs=3, **config)  # shared cache
    return Judge(cfg), gates


def test_timing_waits_for_the_gate_past_the_time_limit(tmp_path, monkeypatch):
    judge, gates = gated_judge(tmp_path, monkeypatch, run_timeout_s=25)
    task = builtin_task("sigmoid_gated_multiply").for_device("cpu")
    assert judge.evaluate(task, tmp_path, timing=False).correct  # probes the task (cached)
    # Another process (here: this one) times on the device for longer than a worker's limit.
    hold_s = 40.0
    gate = DeviceGate("cpu", gates)
    held = threading.Event()

    def other_timer():
        with gate.exclusive():
            held.set()
            time.sleep(hold_s)

    thread = threading.Thread(target=other_timer)
    thread.start()
    held.wait()
    start = time.monotonic()
    try:
        verdict = judge.evaluate(task, tmp_path, timing=True)
    finally:
        thread.join()
    assert verdict.correct and verdict.verdict == "accept", verdict.error
    assert time.monotonic() - start >= hold_s
    waited = verdict.stage_times_s.get("candidate.gate", 0) + verdict.stage_times_s.get(
        "reference.gate", 0
    )
    assert waited >= hold_s - 25  # the workers' start-up overlaps the first part of the hold
    assert verdict.time_ms["candidate"] > 0 and verdict.time_ms["eager"] > 0


def test_without_the_gate_nothing_waits(tmp_path, monkeypatch):
    judge, gates = gated_judge(tmp_path, monkeypatch, device_gate=False)
    task = builtin_task("sigmoid_gated_multiply").for_device("cpu")
    with DeviceGate("cpu", gates).exclusive():
        verdict = judge.evaluate(task, tmp_path, timing=True)
    assert verdict.correct, verdict.error
    assert "candidate.gate" not in verdict.stage_times_s
