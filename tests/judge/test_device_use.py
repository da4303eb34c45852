"""Reservations from measured use: the rule (judge.device_bytes_for) and whose memory counts."""

import os
import subprocess
import sys

from cuda_gym.judge import judge as judge_module
from cuda_gym.judge.device_use import _descends, process_bytes
from cuda_gym.judge.judge import (
    MEMORY_OVERHEAD_BYTES,
    USE_HEADROOM,
    USE_MARGIN_BYTES,
    device_bytes_estimate,
    device_bytes_for,
)

GiB = 1 << 30
PROBE = {"device_peak": {"allocated": 8 * GiB, "reserved": 10 * GiB}}


def test_the_estimate_until_a_judgement_of_the_task_was_measured(monkeypatch):
    monkeypatch.setattr(judge_module, "_DEVICE_USE", {})
    monkeypatch.setattr(judge_module, "_DEVICE_USE_REFUSED", set())
    estimate = device_bytes_estimate(PROBE)
    assert estimate == int(2.2 * 10 * GiB) + MEMORY_OVERHEAD_BYTES
    assert device_bytes_for(PROBE, "task") == estimate


def test_measured_use_with_headroom_never_above_the_estimate(monkeypatch):
    monkeypatch.setattr(judge_module, "_DEVICE_USE", {"small": 6 * GiB, "large": 40 * GiB})
    monkeypatch.setattr(judge_module, "_DEVICE_USE_REFUSED", set())
    assert device_bytes_for(PROBE, "small") == int(USE_HEADROOM * 6 * GiB) + USE_MARGIN_BYTES
    assert device_bytes_for(PROBE, "large") == device_bytes_estimate(PROBE)


def test_a_task_whose_measured_reservation_ran_out_reserves_the_estimate(monkeypatch):
    monkeypatch.setattr(judge_module, "_DEVICE_USE", {"task": 6 * GiB})
    monkeypatch.setattr(judge_module, "_DEVICE_USE_REFUSED", {"task"})
    assert device_bytes_for(PROBE, "task") == device_bytes_estimate(PROBE)


def test_no_probe_peak_no_reservation(monkeypatch):
    monkeypatch.setattr(judge_module, "_DEVICE_USE", {"task": 6 * GiB})
    assert device_bytes_for({}, "task") is None


def test_a_runners_descendants_count_and_strangers_do_not():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _descends(child.pid, {os.getpid()})  # a child of ours
        assert _descends(child.pid, {child.pid})
        assert not _descends(os.getpid(), {child.pid})  # its parent is not its descendant
        assert not _descends(1, {child.pid})
    finally:
        child.kill()
        child.wait()


def test_no_nvml_or_no_such_gpu_measures_nothing():
    assert process_bytes("not-a-gpu", [os.getpid()]) is None
