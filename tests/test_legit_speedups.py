"""benchmarks.legit_speedups: the comparison with a previous timer's speedups."""

from benchmarks.exploits import SUITE
from benchmarks.legit_speedups import PREVIOUS, compare


def test_speedups_are_compared_case_by_case_within_two_percent():
    previous = {
        "a": {PREVIOUS: {"speedup_vs_eager": 2.0}},
        "b": {PREVIOUS: {"speedup_vs_eager": 1.0}},
        "c": {"other_timer": {"speedup_vs_eager": 1.0}},
    }
    results = {
        "a": [{"speedup_vs_eager": 1.0}, {"speedup_vs_eager": 1.98}],  # the last round counts
        "b": [{"speedup_vs_eager": 1.05}],
        "c": [{"speedup_vs_eager": 1.0}],  # nothing to compare with
        "d": [{"speedup_vs_eager": None}],
    }
    out = compare(results, previous)
    assert set(out) == {"a", "b"}
    assert out["a"]["within"] and out["a"]["ratio"] == 0.99
    assert not out["b"]["within"]


def test_the_cuda_cases_are_the_six_of_the_trusted_timer_issue():
    names = {c.name for c in SUITE.load_cases("cuda") if c.legit}
    assert {
        "legit_fused_gated_kernel",
        "legit_fused_gelu_scale_residual",
        "legit_views_and_empty_like",
        "legit_row_softmax_reduction",
        "legit_linear_double_accumulation",
        "legit_naive_slow_kernel",
    } <= names
