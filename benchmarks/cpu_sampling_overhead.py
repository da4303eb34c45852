"""What the CPU watch's sampling (cuda_gym.judge.cpu_time) adds to a timed call on the CPU.

A child process runs one fixed CPU operation per call (`torch.sin` over N floats on T threads),
timed inside the child around each call. Blocks of calls alternate between sampled (a
`PerfSampler` attached from this process, at the judge's period, draining in its thread) and
not sampled; the overhead is the ratio of the medians of the per-call times, per block pair.

    python -m benchmarks.cpu_sampling_overhead --blocks 10 --calls 50 \
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
n, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
x = torch.randn(n)
out = torch.empty_like(x)
for _ in range(20):
    torch.sin(x, out=out)
print("ready", flush=True)
for line in sys.stdin:
    calls = int(line)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        torch.sin(x, out=out)
        times.append(time.perf_counter() - start)
    print(" ".join(f"{t * 1e3:.5f}" for t in times), flush=True)
"""


def _block(child: subprocess.Popen, calls: int) -> list[float]:
    child.stdin.write(f"{calls}\n")
    child.stdin.flush()
    return [float(v) for v in child.stdout.readline().split()]


def main(argv: list[str] | None = None) -> dict:
    """Run the comparison; print and return the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=10, help="block pairs (default 10)")
    parser.add_argument("--calls", type=int, default=50, help="calls per block (default 50)")
    parser.add_argument("--elements", type=int, default=1 << 22, help="floats per call")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in the child")
    parser.add_argument("--out", type=Path, help="write the summary JSON here")
    args = parser.parse_args(argv)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(args.elements), str(args.threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    ratios, plain_ms, sampled_ms, samples = [], [], [], 0
    try:
        assert child.stdout.readline().strip() == "ready"
        for k in range(args.blocks):
            order = (False, True) if k % 2 == 0 else (True, False)
            block = {}
            for sampled in order:
                if sampled:
                    with PerfSampler(child.pid, period_ns=PERIOD_NS) as sampler:
                        block[sampled] = statistics.median(_block(child, args.calls))
                        samples += len(sampler.collect().rows)
                else:
                    block[sampled] = statistics.median(_block(child, args.calls))
            plain_ms.append(block[False])
            sampled_ms.append(block[True])
            ratios.append(block[True] / block[False])
    finally:
        child.stdin.close()
        child.wait(30)
    summary = {
        "command": "python -m benchmarks.cpu_sampling_overhead " + " ".join(argv or sys.argv[1:]),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "period_ns": PERIOD_NS,
        "elements": args.elements,
        "threads": args.threads,
        "blocks": args.blocks,
        "calls_per_block": args.calls,
        "plain_call_ms_median": round(statistics.median(plain_ms), 4),
        "sampled_call_ms_median": round(statistics.median(sampled_ms), 4),
        "overhead_ratio_median": round(statistics.median(ratios), 4),
        "overhead_ratio_p10_p90": [
            round(sorted(ratios)[len(ratios) // 10], 4),
            round(sorted(ratios)[(9 * len(ratios)) // 10], 4),
        ],
        "samples_per_sampled_block": round(samples / max(1, args.blocks), 1),
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
