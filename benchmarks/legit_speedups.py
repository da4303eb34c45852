"""The exploit suite's legitimate cases judged with timing: speedups against a previous timer's.

Each legitimate case of `benchmarks/exploits` for the device is judged ROUNDS times with the
default judge configuration (one `Judge`, the default cache: the first round may probe and time
baselines, later rounds are warm). Printed per case: the last round's candidate and eager times,
the speedup, and the driver's own figures (host time to "done", the empty call subtracted, the
finish; with `--trace-events`, forward's time by the runner's own CUDA events, to see how much
of the host window is the GPU's). With `--compare FILE`, the speedups are set against those FILE
records for the same cases (the in-process timer's, in `results/timing_fidelity_h200.json`, key
`driver_vs_in_process_timer`): the criterion of the trusted-timer issue is every speedup within
2 % of the in-process one.

    python -m benchmarks.legit_speedups --device cuda --rounds 2 \\
        --compare benchmarks/results/timing_fidelity_h200.json --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.exploits import SUITE
from cuda_gym.judge.driver import TRACE_EVENTS_ENV

WITHIN = 0.02
COMPARE_KEY = "driver_vs_in_process_timer"
PREVIOUS = "in_process_63b703d"


def judge_case(judge, case, device: str) -> dict:
    """One timed judgement of `case`: the figures this benchmark reports."""
    from cuda_gym.tasks import load_task

    task = load_task(SUITE.task_ref(case)).for_device(device)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cuda_gym_legit_") as tmp:
        SUITE.write_solution(case, device, Path(tmp))
        verdict = judge.evaluate(task, tmp, timing=True)
    timing = verdict.flags.get("candidate_timing") or {}
    return {
        "verdict": verdict.verdict,
        "error": (verdict.error or "")[:300] or None,
        "candidate_ms": (verdict.time_ms or {}).get("candidate"),
        "eager_ms": (verdict.time_ms or {}).get("eager"),
        "speedup_vs_eager": verdict.speedup_vs_eager,
        "host_median_ms": timing.get("host_median_ms"),
        "empty_call_ms": timing.get("round_trip_ms"),
        "finish_ms": timing.get("finish_ms"),
        "runner_event_ms": timing.get("runner_event_ms"),
        "runner_trace_ms": timing.get("runner_trace_ms"),
        "spread": timing.get("spread"),
        "seconds": round(time.monotonic() - start, 1),
    }


def compare(results: dict, previous: dict) -> dict:
    """Per case: this run's speedup over the previous timer's, and whether it is within 2 %."""
    out = {}
    for name, rounds in results.items():
        before = ((previous.get(name) or {}).get(PREVIOUS) or {}).get("speedup_vs_eager")
        now = rounds[-1]["speedup_vs_eager"]
        if before and now:
            ratio = now / before
            out[name] = {
                "previous": before,
                "now": now,
                "ratio": round(ratio, 4),
                "within": abs(ratio - 1) <= WITHIN,
            }
    return out


def main(argv: list[str] | None = None) -> dict:
    from cuda_gym.judge import Judge, JudgeConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", nargs="+", metavar="CASE", help="these legitimate cases only")
    parser.add_argument("--compare", type=Path, help="a results file with the previous figures")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--trace-events",
        action="store_true",
        help="also report forward's time by the runner's own CUDA events, and where each call's "
        "host time went (diagnostics)",
    )
    parser.add_argument(
        "--eager-only",
        action="store_true",
        help="time the eager baseline alone (the compared speedup is against eager)",
    )
    args = parser.parse_args(argv)
    if args.trace_events:
        os.environ[TRACE_EVENTS_ENV] = "1"  # read by the judge's drivers, which inherit it
    cases = [c for c in SUITE.load_cases(args.device, args.only) if c.legit]
    baselines = {"baselines": ("eager",)} if args.eager_only else {}
    judge = Judge(JudgeConfig(device=args.device, **baselines))
    results: dict[str, list[dict]] = {c.name: [] for c in cases}
    for round_ in range(args.rounds):
        for case in cases:
            record = judge_case(judge, case, args.device)
            results[case.name].append(record)
            print(f"round {round_ + 1} {case.name}: {json.dumps(record)}", flush=True)
    report = {
        "benchmark": "legit_speedups",
        "command": "python -m benchmarks.legit_speedups " + " ".join(argv or sys.argv[1:]),
        "device": args.device,
        "host": platform.node(),
        "rounds": args.rounds,
        "cases": results,
    }
    if args.compare:
        previous = json.loads(args.compare.read_text()).get(COMPARE_KEY, {}).get("cases", {})
        report["compared"] = compare(results, previous)
        report["all_within_2_pct"] = bool(report["compared"]) and all(
            c["within"] for c in report["compared"].values()
        )
        for name, row in report["compared"].items():
            print(f"{name}: {row['previous']:.3f} -> {row['now']:.3f} ({row['ratio']:.3f})")
        print(f"all within {WITHIN:.0%}: {report['all_within_2_pct']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
