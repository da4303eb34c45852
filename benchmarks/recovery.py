"""Recovery of the judge after hostile kernels: each is rejected and the next judgement works.

Run from the repository root::

    python -m benchmarks.recovery --device cuda --out benchmarks/results/recovery_h200.json

For each failure (an illegal memory access, a kernel that never returns, `_exit(0)` from C++,
allocations until the GPU has no memory left) the bad solution is judged, then a good fused
kernel is judged right after with the same `Judge`. Recorded per failure: the bad verdict and its
reason, how long the bad judgement took, and the recovery time (the next good judgement's
duration, to compare with the good judgement measured before any failure). Every bad case must
be rejected for its reason and every good judgement accepted; the exit status is 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.case_suite import observed_reason, parse_case
from benchmarks.exploits import SUITE
from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.tasks import builtin_task

FAILURES = {
    "cpu": ["infinite_loop_kernel", "exit_cpp_underscore_exit", "segfault_kernel"],
    "cuda": [
        "cuda_illegal_address",
        "infinite_loop_kernel",
        "exit_cpp_underscore_exit",
        "cuda_out_of_memory",
    ],
}
GOOD_CASE = "legit_fused_gated_kernel"


def judge_once(judge: Judge, case_name: str, device: str, root: Path, timing: bool) -> dict:
    """Judge one case; return its verdict summary and duration."""
    case = parse_case(SUITE.cases_dir / f"{case_name}.py")
    task = builtin_task(case.task).for_device(device)
    start = time.monotonic()
    verdict = judge.evaluate(task, SUITE.write_solution(case, device, root), timing=timing)
    seconds = time.monotonic() - start
    observed = observed_reason(verdict.to_dict())
    return {
        "case": case_name,
        "expected": case.expected,
        "observed": observed,
        "ok": observed in case.expected_reasons,
        "verdict": verdict.verdict,
        "error": (verdict.error or "")[:300],
        "seconds": round(seconds, 2),
        "stage_times_s": verdict.stage_times_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=sorted(FAILURES))
    parser.add_argument("--run-timeout", type=float, default=60.0, help="per-process limit (s)")
    parser.add_argument("--timing", action="store_true", help="time the good judgements too")
    parser.add_argument("--warm", type=int, default=2, help="good judgements before failures")
    parser.add_argument("--only", nargs="+", metavar="CASE", help="these failures only")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    failures = args.only or FAILURES[args.device]

    judge = Judge(JudgeConfig(device=args.device, run_timeout_s=args.run_timeout))
    root = Path(tempfile.mkdtemp(prefix="recovery_"))
    rows = []
    try:
        # Warm the build cache, the task probe and (with --timing) the baselines first.
        before = [
            judge_once(judge, GOOD_CASE, args.device, root / f"warm{i}", args.timing)
            for i in range(args.warm)
        ]
        for name in failures:
            bad = judge_once(judge, name, args.device, root / f"bad-{name}", False)
            good = judge_once(judge, GOOD_CASE, args.device, root / f"after-{name}", args.timing)
            rows.append({"failure": bad, "next_good": good})
            print(
                f"{name}: {bad['verdict']} ({bad['observed']}, expected {bad['expected']}) in "
                f"{bad['seconds']:.1f} s; next good judgement {good['verdict']} in "
                f"{good['seconds']:.1f} s",
                flush=True,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ok = all(r["failure"]["ok"] and r["next_good"]["ok"] for r in rows) and all(
        b["ok"] for b in before
    )
    result = {
        "command": " ".join(["python -m benchmarks.recovery", *(argv or sys.argv[1:])]),
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "torch": torch.__version__,
        "run_timeout_s": args.run_timeout,
        "good_before_failures_s": [b["seconds"] for b in before],
        "recovery_s_median": statistics.median(r["next_good"]["seconds"] for r in rows),
        "all_as_expected": ok,
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
