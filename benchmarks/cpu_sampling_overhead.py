"""What the CPU watch's sampling (cuda_gym.judge.cpu_time) adds to a timed call on the CPU.

A child process runs one fixed CPU operation per call, timed inside the child around each
call: `torch.sin` over 4M floats on one thread, or a 512x512 GEMM on every core. Blocks of calls
alternate between sampled (a `PerfSampler` attached from this process, at the judge's period,
draining in its thread) and not sampled; the overhead is the ratio of the medians of the
per-call times, per block pair. The judge samples both sides of a speedup, so what matters is
`speedup_bias`: the two workloads' overheads divided (1: sampling leaves a speedup as it is).
`--per-cpu` samples the way the judge samples a solution's runner on the CPU (one event per CPU,
the child's threads picked out; the baselines are sampled per thread): compare the overheads of
the two runs for the bias between a solution and its baselines. `--rearm` (with --per-cpu)
restarts each CPU's timer with a random period after every tick, as the judge does.

    python -m benchmarks.cpu_sampling_overhead --blocks 10 --calls 50 [--per-cpu [--rearm]] \
        --out FILE.json  (summary: benchmarks/results/sandbox_overhead.json, key cpu_sampling)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from cuda_gym.judge.cpu_time import PERIOD_NS
from cuda_gym.runtime.perf_sampling import PerfSampler

CHILD = """
import sys, time, torch
kind, threads = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(threads)
if kind == "sin":  # one thread streaming through memory
    x = torch.randn(1 << 22)
    out = torch.empty_like(x)
    work = lambda: torch.sin(x, out=out)
else:  # a GEMM on every thread
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    out = torch.empty(512, 512)
    work = lambda: torch.mm(a, b, out=out)
for _ in range(20):
    work()
print("ready", flush=True)
for line in sys.stdin:
    times = []
    for _ in range(int(line)):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    print(" ".join(f"{t * 1e3:.5f}" for t in times), flush=True)
"""
# (name, torch threads): the two sides of a speedup are rarely the same kind of work
WORKLOADS = (("sin", 1), ("mm", os.cpu_count() or 1))


def _block(child: subprocess.Popen, calls: int) -> list[float]:
    child.stdin.write(f"{calls}\n")
    child.stdin.flush()
    return [float(v) for v in child.stdout.readline().split()]


def overhead(
    kind: str, threads: int, blocks: int, calls: int, per_cpu: bool = False, rearm: bool = False
) -> dict:
    """Sampled / plain median call time of one workload, over alternating block pairs."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, kind, str(threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    ratios, plain_ms, sampled_ms, samples = [], [], [], 0
    try:
        assert child.stdout.readline().strip() == "ready"
        for k in range(blocks):
            block = {}
            for sampled in (False, True) if k % 2 == 0 else (True, False):
                if sampled:
                    with PerfSampler(
                        child.pid, period_ns=PERIOD_NS, per_cpu=per_cpu, rearm=rearm
                    ) as sampler:
                        block[sampled] = statistics.median(_block(child, calls))
                        samples += len(sampler.collect().rows)
                else:
                    block[sampled] = statistics.median(_block(child, calls))
            plain_ms.append(block[False])
            sampled_ms.append(block[True])
            ratios.append(block[True] / block[False])
    finally:
        child.stdin.close()
        child.wait(30)
    ratios.sort()
    return {
        "threads": threads,
        "plain_call_ms_median": round(statistics.median(plain_ms), 4),
        "sampled_call_ms_median": round(statistics.median(sampled_ms), 4),
        "overhead_ratio_median": round(statistics.median(ratios), 4),
        "overhead_ratio_p10_p90": [
            round(ratios[len(ratios) // 10], 4),
            round(ratios[(9 * len(ratios)) // 10], 4),
        ],
        "samples_per_sampled_block": round(samples / max(1, blocks), 1),
    }


def main(argv: list[str] | None = None) -> dict:
    """Run the comparison; print and return the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=10, help="block pairs (default 10)")
    parser.add_argument("--calls", type=int, default=50, help="calls per block (default 50)")
    parser.add_argument("--per-cpu", action="store_true", help="sample per CPU (else per thread)")
    parser.add_argument(
        "--rearm", action="store_true", help="per CPU, re-arm each timer at random after each tick"
    )
    parser.add_argument("--out", type=Path, help="write the summary JSON here")
    args = parser.parse_args(argv)
    found = {
        kind: overhead(kind, threads, args.blocks, args.calls, args.per_cpu, args.rearm)
        for kind, threads in WORKLOADS
    }
    a, b = (found[kind]["overhead_ratio_median"] for kind, _ in WORKLOADS)
    summary = {
        "command": "python -m benchmarks.cpu_sampling_overhead " + " ".join(argv or sys.argv[1:]),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "period_ns": PERIOD_NS,
        "sampling": "per-thread" if not args.per_cpu else "per-cpu" + "-rearmed" * args.rearm,
        "blocks": args.blocks,
        "calls_per_block": args.calls,
        "workloads": found,
        # what sampling both sides does to a speedup of one over the other (1: nothing)
        "speedup_bias": round(a / b, 4),
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
