"""The perf-event sampler, on real child processes."""

import contextlib
import os
import subprocess
import sys
import time

import pytest

from cuda_gym.runtime.perf_sampling import (
    PerfSampler,
    PerfUnavailable,
    executable_maps,
    process_tree,
)

# Spins one thread now and, after a pause, a second thread started after the sampler attached.
CHILD = """
import sys, threading, time
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))
late = threading.Thread(target=spin, args=(0.6,))
late.start()
spin(0.6)
late.join()
"""


def _sampler(pid: int) -> PerfSampler:
    try:
        return PerfSampler(pid, period_ns=500_000)
    except PerfUnavailable as exc:
        pytest.skip(f"this kernel does not let us sample: {exc}")


@contextlib.contextmanager
def _spinning_child():
    """The CHILD process, started and waiting for "go"."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "ready\n"
        yield child
    finally:
        child.kill()
        child.wait()


def _go_and_wait(child) -> None:
    child.stdin.write("go\n")
    child.stdin.flush()
    child.wait(30)


def test_samples_every_thread_including_one_started_after_attaching():
    with _spinning_child() as child, _sampler(child.pid) as sampler:
        start = time.monotonic_ns()
        _go_and_wait(child)
        got = sampler.collect()
    assert got.lost == 0
    tids = {tid for _, pid, tid, _ in got.rows if pid == child.pid}
    assert len(tids) >= 2  # the main thread and the thread started after attaching
    # about 1.2 s of CPU time at one sample per 0.5 ms (a loaded machine gives less)
    assert 300 <= len(got.rows) <= 3000
    assert all(at >= start - 1_000_000_000 for *_, at in got.rows)  # CLOCK_MONOTONIC ns
    # nearly every sample is in the interpreter's code, in a mapping seen while sampling
    maps = got.maps[child.pid]
    located = [ip for ip, *_ in got.rows if any(m.start <= ip < m.end for m in maps)]
    assert len(located) >= 0.95 * len(got.rows)


def test_quiet_holds_the_draining_and_collect_still_empties_the_rings():
    with _spinning_child() as child, _sampler(child.pid) as sampler:
        sampler.quiet(True)
        _go_and_wait(child)
        assert sampler._samples.rows == []  # nothing drained while quiet
        sampler.quiet(False)
        assert sampler.collect().rows
        assert sampler.collect().rows == []  # collected once


def test_a_process_that_is_gone_is_refused():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(PerfUnavailable):
        PerfSampler(child.pid)


def test_executable_maps_of_this_process_include_the_interpreter():
    maps = executable_maps(os.getpid())
    assert any("python" in m.path or "libpython" in m.path for m in maps)
    assert all(m.start < m.end for m in maps)


def testprocess_tree_include_grandchildren():
    code = "import subprocess as s; p = s.Popen(['sleep', '30']); print(p.pid, flush=1); p.wait()"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(child.stdout.readline())
        assert process_tree(child.pid) == [child.pid, grandchild]
    finally:
        subprocess.run(["kill", str(grandchild)], check=False)
        child.kill()
        child.wait()
