"""Where a judge worker's start-up time goes on the GPU: torch import, CUDA start, the profiler.

Each repeat runs a fresh Python process (as a judge worker is) that times, in order: `import
torch`; the first CUDA tensor (context creation); a first session of the autograd profiler with
CPU and CUDA activities (the judge's profiler; CUPTI attaches here); then sessions of the
`torch.profiler` front end: the first with CPU activities only (it imports torch._inductor), the
first and a second with CUDA activities; and the host time of one tiny kernel launch plus
synchronize before and after the profiler ran (does CUPTI stay attached and slow launches once
the session is over?).

    python -m benchmarks.profiler_start --repeats 3 \
        --out benchmarks/results/profiler_start_h200.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
from torch.profiler import ProfilerActivity, profile
t_import = time.perf_counter() - t0

def launch_us(n=2000):
    x = torch.zeros(1, device="cuda")
    for _ in range(50):
        x.add_(1)
    torch.cuda.synchronize()
    samples = []
    for _ in range(n):
        s = time.perf_counter()
        x.add_(1)
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - s)
    samples.sort()
    return samples[len(samples) // 2] * 1e6

t0 = time.perf_counter()
x = torch.zeros(1, device="cuda")
torch.cuda.synchronize()
t_cuda = time.perf_counter() - t0
before = launch_us()

s = time.perf_counter()
with torch.autograd.profiler.profile(use_cpu=True, use_device="cuda", use_kineto=True):
    x.add_(1)
    torch.cuda.synchronize()
t_autograd = time.perf_counter() - s
inductor_after_autograd = "torch._inductor" in sys.modules

def session(activities):
    s = time.perf_counter()
    with profile(activities=activities):
        x.add_(1)
        torch.cuda.synchronize()
    return time.perf_counter() - s

t_cpu = session([ProfilerActivity.CPU])
t_first = session([ProfilerActivity.CPU, ProfilerActivity.CUDA])
t_second = session([ProfilerActivity.CPU, ProfilerActivity.CUDA])
after = launch_us()
print(json.dumps({
    "import_torch_s": t_import, "cuda_start_s": t_cuda, "autograd_profiler_first_s": t_autograd,
    "inductor_imported_by_autograd_profiler": inductor_after_autograd,
    "profiler_cpu_only_first_s": t_cpu,
    "profiler_cuda_first_s": t_first, "profiler_cuda_second_s": t_second,
    "launch_sync_us_before": before, "launch_sync_us_after": after,
    "device": torch.cuda.get_device_name(), "torch": torch.__version__,
}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    runs = []
    for _ in range(args.repeats):
        proc = subprocess.run(
            [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300
        )
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            return 1
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(runs[-1]))
    keys = [k for k, v in runs[0].items() if type(v) is float]
    medians = {k: round(statistics.median(r[k] for r in runs), 4) for k in keys}
    report = {
        "benchmark": "profiler_start",
        "command": "python -m benchmarks.profiler_start " + " ".join(argv or sys.argv[1:]),
        "device": runs[0]["device"],
        "torch": runs[0]["torch"],
        "repeats": args.repeats,
        "median": medians,
        "runs": runs,
    }
    print(json.dumps(medians, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
