"""The published metrics on hand-computed examples."""

import json
import math

import pytest

from benchmarks.kernelbench.metrics import (
    Outcome,
    effort,
    fast_p,
    geomean,
    percentile,
    score,
    spread,
    summarize,
)

# Level A (4 problems): correct 3x/1.2x, correct 0.5x/2.0x, correct but untimed, wrong (4x).
LEVEL_A = [
    Outcome(True, 3.0, 1.2),
    Outcome(True, 0.5, 2.0),
    Outcome(True, None, None),
    Outcome(False, 4.0, 4.0),
]
# Level B (2 problems): correct at exactly 1.0x eager / 0.8x compile, and wrong.
LEVEL_B = [Outcome(True, 1.0, 0.8), Outcome(False)]


def test_level_scores_by_hand():
    m = score(LEVEL_A)
    assert m["n"] == 4 and m["correct"] == 3
    assert m["pass_rate"] == 0.75
    assert m["faster_than_eager_rate"] == 0.25  # only the 3.0x one: the wrong 4.0x never counts
    assert m["faster_than_compile_rate"] == 0.5  # 1.2x and 2.0x
    assert m["geomean_speedup_vs_eager"] == pytest.approx(math.sqrt(3.0 * 0.5))
    assert m["geomean_speedup_vs_compile"] == pytest.approx(math.sqrt(1.2 * 2.0))
    assert m["timed_correct_vs_eager"] == 2
    assert m["fast_p_vs_eager"] == {
        "fast_0": 0.5,  # the untimed correct solution has no speedup: not counted
        "fast_0.5": 0.25,  # strict >: 0.5x is not faster than 0.5
        "fast_0.8": 0.25,
        "fast_1": 0.25,
        "fast_1.5": 0.25,
        "fast_2": 0.25,
    }
    assert m["fast_p_vs_compile"] == {
        "fast_0": 0.5,
        "fast_0.5": 0.5,
        "fast_0.8": 0.5,
        "fast_1": 0.5,
        "fast_1.5": 0.25,
        "fast_2": 0.0,  # 2.0x is not > 2
    }


def test_speedup_of_exactly_one_is_not_faster():
    m = score(LEVEL_B)
    assert m["pass_rate"] == 0.5
    assert m["faster_than_eager_rate"] == 0.0
    assert m["fast_p_vs_eager"]["fast_0.8"] == 0.5
    assert m["geomean_speedup_vs_eager"] == 1.0


def test_overall_weighs_levels_by_their_problem_counts():
    s = summarize({1: LEVEL_A, 2: LEVEL_B})
    assert set(s["levels"]) == {"level1", "level2"}
    o = s["overall"]
    assert o["n"] == 6 and o["correct"] == 4
    assert o["pass_rate"] == pytest.approx(4 / 6)
    # = (4 * 0.75 + 2 * 0.5) / 6: level-count weighted
    assert o["pass_rate"] == pytest.approx((4 * 0.75 + 2 * 0.5) / 6)
    assert o["faster_than_eager_rate"] == pytest.approx(1 / 6)
    assert o["faster_than_compile_rate"] == pytest.approx(2 / 6)
    assert o["geomean_speedup_vs_eager"] == pytest.approx((3.0 * 0.5 * 1.0) ** (1 / 3))
    assert o["fast_p_vs_compile"]["fast_0.5"] == pytest.approx(3 / 6)


def test_empty_and_helpers():
    assert geomean([]) is None
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert fast_p([], 1.0, "eager") == 0.0
    assert score([])["pass_rate"] == 0.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([0.0, 10.0], 5) == pytest.approx(0.5)
    assert spread([]) is None
    assert spread([1.0, 3.0]) == {
        "n": 2,
        "median": 2.0,
        "p05": pytest.approx(1.1),
        "p95": pytest.approx(2.9),
        "min": 1.0,
        "max": 3.0,
    }


def test_records_that_did_not_finish_count_as_incorrect():
    assert Outcome.from_record(None) == Outcome(False)
    assert Outcome.from_record({"status": "error", "correct": True}) == Outcome(False)
    assert Outcome.from_record({"status": "missing"}) == Outcome(False)
    done = {"status": "done", "correct": True, "speedup_vs_eager": 2.0, "speedup_vs_compile": None}
    assert Outcome.from_record(done) == Outcome(True, 2.0, None)


def test_effort_sums_turns_tokens_and_time():
    records = [
        {
            "wall_s": 2.0,
            "agent": {
                "turns": 3,
                "usage": {"total_tokens": 30, "prompt_tokens": 20, "completion_tokens": 10},
                "agent_s": 1.0,
            },
        },
        {
            "wall_s": 4.0,
            "agent": {
                "turns": 5,
                "usage": {"total_tokens": 50, "prompt_tokens": 40, "completion_tokens": 10},
                "agent_s": 2.0,
            },
        },
    ]
    e = effort(records)
    assert e["wall_s_total"] == 6.0 and e["wall_s_mean"] == 3.0
    assert e["turns_total"] == 8 and e["turns_mean"] == 4.0 and e["turns_median"] == 4.0
    assert e["tokens_total"] == 80 and e["prompt_tokens_total"] == 60
    assert e["completion_tokens_total"] == 20 and e["agent_s_total"] == 3.0
    assert "turns_total" not in effort([{"wall_s": 1.0}])


def _timed_record(level, speedup, kernels_ms, timed_ms):
    flags = {} if kernels_ms is None else {"profile_kernel_ms_per_call": kernels_ms}
    return {
        "level": level,
        "status": "done",
        "correct": True,
        "speedup_vs_eager": speedup,
        "speedup_vs_compile": None,
        "verdict": {"flags": flags, "time_ms": {"candidate": timed_ms}},
    }


def test_the_spread_is_split_by_how_much_of_the_timed_call_kernels_fill():
    from benchmarks.kernelbench.report import kernel_share, speedup_spread

    records = [
        _timed_record(1, 1.0, 9.5, 10.0),  # 95 %: GPU-bound
        _timed_record(1, 0.99, 9.0, 10.0),  # 90 %: GPU-bound (the threshold)
        _timed_record(3, 0.6, 2.0, 10.0),  # 20 %: host-bound
        _timed_record(3, 1.4, None, 10.0),  # not profiled: in neither
    ]
    assert kernel_share(records[0]) == pytest.approx(0.95) and kernel_share(records[3]) is None
    spread = speedup_spread(records)
    assert spread["gpu_bound"]["eager"]["n"] == 2
    assert spread["gpu_bound"]["eager"]["median"] == pytest.approx(0.995)
    assert spread["host_bound"]["eager"] == {
        "n": 1,
        "median": 0.6,
        "p05": 0.6,
        "p95": 0.6,
        "min": 0.6,
        "max": 0.6,
    }
    assert spread["overall"]["eager"]["n"] == 4 and spread["overall"]["compile"] is None
    # Without profiles (the CPU device) there is no such split.
    assert set(speedup_spread(records[3:])) == {"level3", "overall"}


def test_a_run_directory_is_summarised_from_its_records(tmp_path):
    from benchmarks.kernelbench.spread import main

    for name, record in (
        ("level1/1_A", _timed_record(1, 1.0, 9.5, 10.0)),
        ("level3/2_B", _timed_record(3, 0.6, 2.0, 10.0)),
    ):
        path = tmp_path / "records" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    (tmp_path / "run.json").write_text(
        json.dumps({"invocations": [{"wall_s": 2.5}, {"wall_s": 4}]})
    )
    summary = main([str(tmp_path), "--out", str(tmp_path / "s.json")])
    assert summary["records"] == summary["correct"] == 2 and summary["total_wall_s"] == 6.5
    assert summary["per_level"] == {"level1": 1, "level3": 1}
    assert summary["speedup_spread"]["host_bound"]["eager"]["median"] == 0.6
    assert json.loads((tmp_path / "s.json").read_text()) == summary
