"""The device gate: timing alone on a device, across processes; and the pausable child clock."""

import os
import signal
import subprocess
import sys
import time

import pytest

from cuda_gym.runtime.device_gate import DeviceGate
from cuda_gym.runtime.process import Pause, run_process

# A child that takes the gate (argv: dir, "shared"|"exclusive", seconds to hold), printing
# "waiting", then "in <time>" once it holds it and "out <time>" after letting go.
CHILD = """
import sys, time
from pathlib import Path
from cuda_gym.runtime.device_gate import DeviceGate
gate = DeviceGate("dev", Path(sys.argv[1]))
print("waiting", flush=True)
with getattr(gate, sys.argv[2])():
    print("in", time.monotonic(), flush=True)
    time.sleep(float(sys.argv[3]))
    print("out", time.monotonic(), flush=True)
"""


def child(tmp_path, how: str, hold_s: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), how, str(hold_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "waiting"
    return proc


def times(proc: subprocess.Popen) -> tuple[float, float]:
    out = proc.stdout.read()  # not communicate(): it would miss what readline buffered
    proc.wait(timeout=60)
    lines = dict(line.split() for line in out.strip().splitlines())
    return float(lines["in"]), float(lines["out"])


def test_timing_waits_for_shared_users_and_excludes_new_ones(tmp_path):
    gate = DeviceGate("dev", tmp_path)
    with gate.shared():
        timer = child(tmp_path, "exclusive", 1.0)
        time.sleep(0.5)
        # A second shared user arriving now queues behind the waiting timer (no starvation).
        reader = child(tmp_path, "shared", 0.1)
        time.sleep(0.5)
        assert timer.poll() is None and reader.poll() is None
        released = time.monotonic()
    timer_in, timer_out = times(timer)
    reader_in, _ = times(reader)
    assert timer_in >= released
    assert reader_in >= timer_out


def test_queued_timers_go_one_after_another_before_shared_work_returns(tmp_path):
    gate = DeviceGate("dev", tmp_path)
    with gate.shared():
        first = child(tmp_path, "exclusive", 0.5)
        time.sleep(0.3)
        reader = child(tmp_path, "shared", 0.1)  # arrives between the two timers
        time.sleep(0.3)
        second = child(tmp_path, "exclusive", 0.5)
        time.sleep(0.3)
        assert first.poll() is None and second.poll() is None and reader.poll() is None
    first_in, first_out = times(first)
    second_in, second_out = times(second)
    reader_in, _ = times(reader)
    # Both timers, in either order, and only then the shared user: one drain for two timings.
    assert reader_in >= max(first_out, second_out)
    assert second_in >= first_out or first_in >= second_out


def test_a_timer_going_back_to_shared_waits_for_the_timers_queued_behind_it(tmp_path):
    gate = DeviceGate("dev", tmp_path)
    with gate.shared():
        with gate.exclusive():
            waiter = child(tmp_path, "exclusive", 0.8)
            time.sleep(0.3)
        back = time.monotonic()
        assert gate.held == "shared"
    waiter_in, waiter_out = times(waiter)
    assert back >= waiter_out
    gate.close()


def test_shared_users_overlap(tmp_path):
    gate = DeviceGate("dev", tmp_path)
    with gate.shared():
        start = time.monotonic()
        other = child(tmp_path, "shared", 0.1)
        other_in, _ = times(other)
    assert other_in - start < 30  # did not wait for this process's hold


def test_other_devices_are_independent(tmp_path):
    with DeviceGate("dev", tmp_path).exclusive():
        other = subprocess.run(
            [sys.executable, "-c", CHILD.replace('"dev"', '"other"'), str(tmp_path), "shared", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert "in" in other.stdout


def test_a_killed_holder_releases_the_gate(tmp_path):
    holder = child(tmp_path, "exclusive", 600)
    assert holder.stdout.readline().startswith("in")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    gate = DeviceGate("dev", tmp_path)
    start = time.monotonic()
    with gate.shared():
        assert gate.held == "shared"
    assert time.monotonic() - start < 5
    assert gate.held is None


def test_exclusive_inside_shared_gives_the_hold_up_and_takes_it_back(tmp_path):
    gate = DeviceGate("dev", tmp_path)
    with gate.shared():
        with gate.exclusive():
            assert gate.held == "exclusive"
            with gate.exclusive(), gate.shared():  # nested: no change
                assert gate.held == "exclusive"
        assert gate.held == "shared"
        # While this process is back to shared, another shared user gets in.
        other = child(tmp_path, "shared", 0)
        times(other)
    assert gate.held is None
    gate.close()


def test_outside_lets_a_timer_in_and_takes_the_shared_hold_back(tmp_path):
    gate = DeviceGate("dev", tmp_path)
    with gate.shared():
        timer = child(tmp_path, "exclusive", 0.5)
        time.sleep(0.3)
        assert timer.poll() is None  # waits for this process's shared hold
        left = time.monotonic()  # before the release: the timer may get in at once
        with gate.outside():
            assert gate.held is None
            time.sleep(0.2)
        back = time.monotonic()
        assert gate.held == "shared"
        timer_in, timer_out = times(timer)
    assert left <= timer_in and back >= timer_out  # the hold came back after the timer left
    with gate.exclusive(), gate.outside():
        assert gate.held == "exclusive"  # a timer keeps its hold
    with gate.outside():
        assert gate.held is None  # nothing held: nothing to give up
    gate.close()


def test_from_outside_a_worker_goes_to_time_alone_without_the_shared_hold_between(
    tmp_path, monkeypatch
):
    # A baseline's first call (torch.compile's compile) runs outside; its timing follows
    # straight from there (cuda_gym.judge.driver.Driver._baselines).
    trace = tmp_path / "trace.txt"
    monkeypatch.setenv("CUDA_GYM_GATE_TRACE", str(trace))
    gate = DeviceGate("dev", tmp_path)
    with gate.shared():
        with gate.outside():
            with gate.exclusive():
                assert gate.held == "exclusive"
            assert gate.held is None
        assert gate.held == "shared"
    gate.close()
    events = [line.split()[2] for line in trace.read_text().splitlines()]
    assert events == [
        "want_shared",
        "shared",
        "out",  # in, then outside
        "want_exclusive",
        "exclusive",
        "out",  # alone from outside
        "want_shared",
        "shared",
        "out",  # back in, then done
    ]


def test_make_way_lets_a_waiting_timer_time_between_two_steps(tmp_path):
    gate = DeviceGate("dev", tmp_path)
    with gate.shared():
        assert not gate.timers_waiting()
        assert gate.make_way() is False  # nobody waits: the hold is kept, nothing waited for
        assert gate.held == "shared"
        timer = child(tmp_path, "exclusive", 0.3)
        time.sleep(0.3)
        assert timer.poll() is None and gate.timers_waiting()
        left = time.monotonic()
        assert gate.make_way() is True
        back = time.monotonic()
        assert gate.held == "shared"
        timer_in, timer_out = times(timer)
        assert left <= timer_in and back >= timer_out  # the timer timed in between
        assert not gate.timers_waiting()
    with gate.exclusive():
        assert gate.make_way() is False  # a timer does not step out
    gate.close()


def test_an_exception_inside_releases_the_gate(tmp_path):
    gate = DeviceGate("dev", tmp_path)
    with pytest.raises(RuntimeError), gate.exclusive():
        raise RuntimeError("boom")
    assert gate.held is None
    times(child(tmp_path, "exclusive", 0))


SLEEPER = [sys.executable, "-c", "import time; time.sleep(2.0)"]


def test_a_paused_clock_lets_the_child_finish():
    pause = Pause(lambda: True, max_s=10)
    result = run_process(SLEEPER, timeout_s=1.0, pause=pause)
    assert result.ok and not result.timed_out
    assert 0.8 < pause.used_s < 2.5


@pytest.mark.parametrize("pause", [Pause(lambda: False, max_s=10), Pause(lambda: True, max_s=0.3)])
def test_the_pause_is_bounded_and_only_while_active(pause):
    result = run_process(SLEEPER, timeout_s=1.0, pause=pause)
    assert result.timed_out
    assert result.duration_s < 1.9


def test_the_pause_flag_is_read_from_a_file(tmp_path):
    flag = tmp_path / "stage"
    flag.write_text("gate")
    script = (
        f"import time, pathlib; time.sleep(1.5); "
        f"pathlib.Path({str(flag)!r}).write_text('run'); time.sleep(1.5)"
    )
    pause = Pause(lambda: flag.read_text() == "gate", max_s=60)
    result = run_process([sys.executable, "-c", script], timeout_s=2.0, pause=pause)
    # Paused for ~1.5 s while the flag said "gate": 2 s of clock covers the remaining 1.5 s.
    assert result.ok, result.describe_failure(2.0)
    assert pause.used_s < 2.5
    assert os.path.exists(flag)
