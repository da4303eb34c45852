"""benchmarks.gate_trace: the device's time at its gate, from the workers' trace lines."""

import os
import subprocess
import sys
import time

import pytest

from benchmarks.gate_trace import read, summarise
from cuda_gym.runtime.device_gate import TRACE_ENV, DeviceGate

# Two workers on a 10 s window: A works shared (its "run" step) from 0 to 4; B asks to time at
# 2, waits for A's step (drain 2-4), times 4-6 and leaves; A comes back at 6 and works to 8;
# nobody holds the device from 8 to 10.
TRACE = """\
0.0 1 stage gate.entry
0.0 1 want_shared
0.0 1 shared
0.0 1 stage run
2.0 2 stage gate.alone
2.0 2 want_exclusive
3.0 1 stage gate.step
3.5 1 out
3.5 1 want_shared
4.0 2 exclusive
4.0 2 stage timing
6.0 2 stage gate.back
6.0 2 out
6.0 1 shared
6.0 1 stage recheck
8.0 1 out
10.0 2 stage done
"""


def test_a_trace_is_swept_into_alone_drain_shared_and_idle(tmp_path):
    path = tmp_path / "trace.txt"
    path.write_text(TRACE + "not a line\n")
    summary = summarise(read(path))
    assert summary["processes"] == 2 and summary["window_s"] == 10.0
    assert summary["seconds"] == {
        "alone": 2.0,
        "drain": 1.5,  # A still holds, finishing its step
        "handover": 0.5,  # A gone, B not in yet
        "shared": 4.0,
        "idle_waiting": 0.0,
        "idle": 2.0,
    }
    assert summary["alone_by_stage"] == {"timing": 2.0}
    assert summary["drain_by_stage"] == {"run": 1.5}  # the stage A's step was in
    assert summary["kept_out_s"] == 2.5  # A, from stepping out (3.5) to coming back (6)
    assert summary["exclusive_holds_s"]["total"] == 2.0
    assert summary["timer_waits_s"]["p50"] == 2.0
    window = summarise(read(path), start=5.0, end=7.0)
    assert window["seconds"]["alone"] == 1.0 and window["seconds"]["shared"] == 1.0


CHILD = """
import sys, time
from pathlib import Path
from cuda_gym.runtime.device_gate import DeviceGate
gate = DeviceGate("dev", Path(sys.argv[1]))
with gate.shared():
    gate.note("stage", "run")
    time.sleep(0.2)
    with gate.exclusive():
        gate.note("stage", "timing")
        time.sleep(0.2)
"""


def test_gates_started_with_the_trace_variable_write_their_transitions(tmp_path):
    trace = tmp_path / "trace.txt"
    env = dict(os.environ, **{TRACE_ENV: str(trace)})
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], env=env) for _ in range(2)
    ]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    events = read(trace)
    assert {pid for _, pid, _, _ in events} == {p.pid for p in procs}
    summary = summarise(events)
    assert summary["exclusive_holds_s"]["n"] == 2  # each timed alone
    assert summary["alone_by_stage"]["timing"] == pytest.approx(0.4, abs=0.15)
    assert summary["seconds"]["alone"] >= 0.35


def test_a_gate_without_the_variable_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(TRACE_ENV, raising=False)
    gate = DeviceGate("dev", tmp_path)
    with gate.exclusive():
        gate.note("stage", "timing")
        time.sleep(0.01)
    gate.close()
    assert sorted(p.name for p in tmp_path.iterdir() if "trace" in p.name) == []
