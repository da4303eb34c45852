"""Host CPU a judge process spends on the GPU outside its work: start-up and waiting on syncs.

An rl_load run on an H100 (`results/rl_load_h100.json`) charged each judgement about 9 s of CPU
in its candidate runner and 5 s in its driver's stage that starts CUDA, while the GPU was a
third busy: the host's cores bound the rate. This measures where such CPU goes, per process,
as CPU time (all of the process's threads: `time.process_time`), with K processes started at
once (K = 1 and the judge's 8 device slots):

- `import_s`: `import torch` in a fresh `python -s -P` (as runner.py is started); 0 for a
  process forked from one that imported it (a zygote).
- `cuda_start_s`: the first CUDA tensor (cuInit, the primary context, the first kernel).
- `sync_wait_s`: CALLS calls of a ~1 ms GEMM, each followed by `torch.cuda.synchronize()`
  (the runner's and the driver's pattern), against their wall time: how much of the wait the
  host spends spinning. With `--blocking`, the primary context is made with
  CU_CTX_SCHED_BLOCKING_SYNC first (the driver API, before PyTorch creates it), so a sync
  sleeps on an interrupt instead.
- `tiny_sync_us`: median host time of one tiny kernel launch + synchronize (what blocking
  adds to each call's round trip).
- `--modes switch` (the runner's pattern: blocking while it serves untimed calls, spinning for
  timed ones): the context PyTorch made is switched to blocking with `cuCtxSetFlags` (CUDA >=
  12.1), `sync_wait_s` measured so, then it is switched to spin: `spun_wait_s` / `spun_wall_s`
  (a third of the calls) and `tiny_sync_us` are measured after the switch, and
  `reblocked_wait_s` once it is blocking again.

    python -m benchmarks.process_cpu --out benchmarks/results/process_cpu_h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import ctypes, json, os, statistics, sys, time

def cpu():
    return time.process_time()

mode = os.environ.get("PROCESS_CPU_MODE", "spin")
blocking = mode == "blocking"
calls = int(os.environ.get("PROCESS_CPU_CALLS", "300"))
c0 = cpu()
import torch
marks = {"import_s": cpu() - c0}
c0 = cpu()
if blocking:
    cuda = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int(0)
    assert cuda.cuInit(0) == 0
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    status = cuda.cuDevicePrimaryCtxSetFlags(dev, 0x4)  # CU_CTX_SCHED_BLOCKING_SYNC
    marks["set_flags_status"] = status
x = torch.zeros(1, device="cuda")
torch.cuda.synchronize()
marks["cuda_start_s"] = cpu() - c0


def set_ctx_flags(flags):
    status = cuda.cuCtxSetFlags(ctypes.c_uint(flags))
    got = ctypes.c_uint(0)
    cuda.cuCtxGetFlags(ctypes.byref(got))
    return status, got.value & 0x7


if mode == "switch":  # the context PyTorch made (default flags), made blocking afterwards
    cuda = ctypes.CDLL("libcuda.so.1")
    marks["block_status_flags"] = set_ctx_flags(0x4)  # CU_CTX_SCHED_BLOCKING_SYNC

a = torch.randn(4096, 4096, device="cuda")
for _ in range(5):
    a @ a
torch.cuda.synchronize()
c0, w0 = cpu(), time.perf_counter()
for _ in range(calls):
    a @ a
    torch.cuda.synchronize()
marks["sync_wait_s"] = cpu() - c0
marks["sync_wall_s"] = time.perf_counter() - w0
if mode == "switch":
    marks["spin_status_flags"] = set_ctx_flags(0x1)  # CU_CTX_SCHED_SPIN
    c0, w0 = cpu(), time.perf_counter()
    for _ in range(calls // 3):
        a @ a
        torch.cuda.synchronize()
    marks["spun_wait_s"] = cpu() - c0
    marks["spun_wall_s"] = time.perf_counter() - w0

lat = []
for _ in range(500):
    s = time.perf_counter()
    x.add_(1)
    torch.cuda.synchronize()
    lat.append(time.perf_counter() - s)
marks["tiny_sync_us"] = statistics.median(lat) * 1e6
if mode == "switch":
    marks["reblock_status_flags"] = set_ctx_flags(0x4)
    c0 = cpu()
    for _ in range(calls // 3):
        a @ a
        torch.cuda.synchronize()
    marks["reblocked_wait_s"] = cpu() - c0
print("RESULT " + json.dumps(marks), flush=True)
"""


def fresh(k: int, env: dict) -> list[dict]:
    """K fresh `python -s -P` processes started at once; their marks."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-s", "-P", "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(k)
    ]
    return [_result(p.communicate()[0]) for p in procs]


def forked(k: int, env: dict) -> list[dict]:
    """K processes forked at once from this one (torch imported, CUDA not started); marks."""
    import torch  # noqa: F401  (imported before the fork, as a zygote has)

    os.environ.update(env)
    reads = []
    for _ in range(k):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.dup2(w, 1)
            try:
                exec(compile(CHILD, "<child>", "exec"), {"__name__": "__child__"})
            finally:
                sys.stdout.flush()
                os._exit(0)
        os.close(w)
        reads.append((pid, r))
    out = []
    for pid, r in reads:
        with os.fdopen(r) as f:
            text = f.read()
        os.waitpid(pid, 0)
        out.append(_result(text))
    return out


def _result(text: str) -> dict:
    for line in text.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return {"error": text[-500:]}


def summarise(rows: list[dict]) -> dict:
    keys = (
        "import_s",
        "cuda_start_s",
        "sync_wait_s",
        "sync_wall_s",
        "tiny_sync_us",
        "spun_wait_s",
        "spun_wall_s",
        "reblocked_wait_s",
    )
    good = [r for r in rows if "error" not in r]
    out = {"n": len(rows), "failed": len(rows) - len(good)}
    for key in keys:
        values = [r[key] for r in good if r.get(key) is not None]
        if values:
            out[key] = round(statistics.median(values), 4)
    switches = ("block_status_flags", "spin_status_flags", "reblock_status_flags")
    flags = {f"{k}={r[k]}" for r in good for k in switches if k in r}
    if flags:
        out["set_flags_status_and_flags"] = sorted(flags)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--starts", nargs="+", default=["fresh", "forked"])
    parser.add_argument(
        "--modes", nargs="+", choices=["spin", "blocking", "switch"], default=["spin", "blocking"]
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import torch  # (CUDA is not started here: forked children start it)

    try:
        device = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        device = ""
    if not device:
        raise SystemExit("process_cpu measures CUDA processes: no GPU here")
    results = {}
    for k in args.concurrency:
        for start in args.starts:
            for mode in args.modes:
                env = {**os.environ, "PROCESS_CPU_MODE": mode, "PROCESS_CPU_CALLS": str(args.calls)}
                run = fresh if start == "fresh" else forked
                t0 = time.perf_counter()
                rows = run(k, env)
                name = f"k{k}_{start}_{mode}"
                results[name] = {**summarise(rows), "wall_s": round(time.perf_counter() - t0, 2)}
                print(name, json.dumps(results[name]), flush=True)
    summary = {
        "benchmark": "process_cpu",
        "command": "python -m benchmarks.process_cpu " + " ".join(sys.argv[1:]),
        "device": device,
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "calls": args.calls,
        "median_per_process": results,
    }
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
