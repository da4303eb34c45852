"""How long one call of a runner may take (the driver's per-call limits)."""

from cuda_gym.judge.config import FIRST_CALL_EXTRA_S
from cuda_gym.judge.driver import Served


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
