"""How long one call of a runner may take (the driver's per-call limits), and what it costs."""

import pytest

from cuda_gym.judge.config import FIRST_CALL_EXTRA_S
from cuda_gym.judge.driver import ROUND_TRIP_CALLS, Served


def _limits(first_extra_s: float) -> list:
    served = Served(None, "cpu", limit=lambda: 2.0, first_extra_s=first_extra_s)
    seen = []
    for calls, profile in [(1, False), (2, False), (3, True), (4, False)]:
        served.calls = calls
        seen.append(served._limit(first=profile))
    return seen


def test_the_first_call_gets_more_time_and_a_jit_solution_more_still():
    assert _limits(FIRST_CALL_EXTRA_S) == [12.0, 2.0, 2.0 + FIRST_CALL_EXTRA_S, 2.0]
    assert _limits(60.0) == [62.0, 2.0, 2.0 + FIRST_CALL_EXTRA_S, 2.0]


def test_runners_without_a_limit_have_none():
    assert Served(None, "cpu")._limit() is None


class _FakeServed:
    """Answers timed calls instantly; its untimed calls took `call_s` each."""

    def __init__(self, call_s: list) -> None:
        self.call_s = call_s
        self.timed = 0
        self.event_ms: list = []  # never traced
        self.trace: list = []

    def trace_ms(self):
        return None

    typical_call_s = Served.typical_call_s

    transport_ms = 0.01
    flush_alone_ms = staticmethod(Served.flush_alone_ms)

    def timed_call(self, inputs, expected, fseed, flush):
        self.timed += 1
        return [inputs[0]], 1.0 + 0.001 * self.timed, 0.0, 0.5


def _timed(call_s: list):
    import random
    import types

    import torch

    from cuda_gym.judge.driver import Driver

    driver = Driver.__new__(Driver)
    driver.req = types.SimpleNamespace(warmup_runs=3, timed_runs=20)
    driver.rng = random.Random(0)
    driver.device = "cpu"
    driver.task = types.SimpleNamespace(get_inputs=lambda: [torch.ones(4)])
    served = _FakeServed(call_s)
    stats, _ = driver._time(served, [torch.ones(4)], recheck=True)
    return stats


def test_a_slow_correct_kernel_is_timed_with_fewer_calls():
    from cuda_gym.judge.driver import MIN_TIMED_RUNS, TIMING_BUDGET_S

    fast = _timed([0.5, 0.001, 0.001])  # the first call (lazy loading) does not count
    assert fast.runs >= 20 and fast.warmup_calls >= 3
    slow = _timed([9.0, 3.0, 3.0])
    assert slow.runs == int(TIMING_BUDGET_S / 3.0) and slow.warmup_calls == 1
    # One call only (a baseline's warm-up, torch.compile's compile): nothing to go by.
    compiled = _timed([60.0])
    assert compiled.runs >= 20 and compiled.warmup_calls >= 3
    glacial = _timed([60.0, 20.0])
    assert glacial.runs == MIN_TIMED_RUNS and glacial.warmup_calls == 1


class _TripLink:
    """Answers empty calls, each taking the next of `trips` (seconds)."""

    def __init__(self, trips: list) -> None:
        self.trips = list(trips)
        self.messages: list = []

    def timed_call(self, message, fds, limit_s):
        self.messages.append(message)
        return None, self.trips.pop(0), 0.0


def test_the_fastest_empty_call_is_subtracted_as_a_busy_host_only_slows_them():
    trips = [0.0004, 0.0001, 0.0009] + [0.0003] * (ROUND_TRIP_CALLS - 3)
    link = _TripLink(trips)
    served = Served(link, "cpu")
    served.measure_transport(5.0, banned=True)
    assert served.transport_ms == pytest.approx(0.1)
    assert len(link.messages) == ROUND_TRIP_CALLS
    assert all(m["kind"] == "null" and m["banned"] is True for m in link.messages)


def test_a_first_call_that_compiles_nothing_gets_a_few_seconds_more_on_either_device():
    from cuda_gym.judge.config import first_call_extra_s

    # (a profiled call still gets FIRST_CALL_EXTRA_S: the profiler's start)
    assert 1.0 <= first_call_extra_s("cpu") <= first_call_extra_s("cuda") < FIRST_CALL_EXTRA_S
