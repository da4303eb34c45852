"""How much of short-lived threads' CPU time each way of sampling sees.

A child starts one thread after another for 1.5 s, each spinning 0.8 ms of CPU time (under one
sampling period), while `PerfSampler` samples it per thread or per CPU, at the judge's period
and at 2.0 ms (in step with a 4 ms scheduler tick), alone or beside two busy processes. Each
run reports the sampled time (samples x period) over the child's user CPU time (/proc).

    python -m benchmarks.short_thread_sampling --runs 6 --out FILE.json
        (summary: benchmarks/results/short_thread_sampling.json)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from cuda_gym.judge.config import CPU_SAMPLE_PERIOD_NS
from cuda_gym.runtime.perf_sampling import PerfSampler, tree_cpu_times

CHILD = r"""
import sys, threading, time
sys.stdout.write("ready\n"); sys.stdout.flush(); sys.stdin.readline()
def spin(s):
    end = time.thread_time() + s
    while time.thread_time() < end:
        pass
end = time.monotonic() + 1.5
while time.monotonic() < end:
    t = threading.Thread(target=spin, args=(0.0008,)); t.start(); t.join()
print("done", flush=True)
"""


def seen_share(per_cpu: bool, period_ns: int) -> float:
    """Sampled seconds over user CPU seconds of one run of CHILD."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "ready\n"
        with PerfSampler(child.pid, period_ns=period_ns, per_cpu=per_cpu) as sampler:
            before = tree_cpu_times(child.pid)[0]
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline() == "done\n"
            user = tree_cpu_times(child.pid)[0] - before
            rows = sampler.collect().rows
    finally:
        child.kill()
        child.wait()
    return round(len(rows) * period_ns / 1e9 / max(user, 1e-9), 3)


def main(argv: list[str] | None = None) -> dict:
    """Run every configuration; print and return the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="runs per configuration")
    parser.add_argument("--out", type=Path, help="write the summary JSON here")
    args = parser.parse_args(argv)
    found = {}
    for load in ("idle", "two_busy_processes"):
        busy = []
        if load != "idle":
            busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(2)]
        try:
            for mode, period in (
                ("per-thread", CPU_SAMPLE_PERIOD_NS),
                ("per-cpu", 2_000_000),
                ("per-cpu", CPU_SAMPLE_PERIOD_NS),
            ):
                shares = sorted(seen_share(mode == "per-cpu", period) for _ in range(args.runs))
                found[f"{load}/{mode}/{period}"] = {
                    "min": shares[0],
                    "max": shares[-1],
                    "median": shares[len(shares) // 2],
                }
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
    summary = {
        "command": "python -m benchmarks.short_thread_sampling " + " ".join(argv or sys.argv[1:]),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "runs": args.runs,
        "sampled_over_user_time": found,
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
