"""How fast a judge worker can hand a large GPU output to another process through the host.

The candidate worker copies every output to the host and saves it for the trusted reference
worker; with GiB-sized outputs that copy can dominate a judgement. This measures, for one
output of --mib MiB: a pageable `.to("cpu")` into fresh memory, a copy into a reused pinned
buffer, and `torch.save` of the host tensor to the temporary directory and to /dev/shm.

With --arena-mib, also the judge's own path (cuda_gym.judge.transfer): in a fresh process, as
each judge worker is, a copy of --arena-mib MiB from the GPU into an arena file in /dev/shm whose
pages are allocated, and back, with the arena's pages pageable or registered with the CUDA
driver for the copy (cuda_gym.judge.pinning; the time includes registering and releasing).

    python -m benchmarks.host_transfer --arena-mib 8192 \
        --out benchmarks/results/host_transfer_arena_h200.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def seconds(fn, repeats: int) -> dict:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "all_s": times}


ARENA_CASES = ("d2h_pageable", "d2h_registered", "h2d_pageable", "h2d_registered")


def arena_child(case: str, arena: str, mib: int) -> dict:
    """One copy of `case` in this (fresh) process: seconds, and whether the pages were pinned."""
    from cuda_gym.judge.pinning import PIN_ENV, registered

    os.environ[PIN_ENV] = "1"
    nbytes = mib << 20
    dev = torch.empty(nbytes // 4, device="cuda")
    dev.normal_()
    torch.cuda.synchronize()
    start = time.perf_counter()
    buf = torch.from_file(arena, shared=True, size=nbytes, dtype=torch.uint8).view(torch.float32)
    with contextlib.ExitStack() as hold:
        pinned = hold.enter_context(registered(buf)) if case.endswith("registered") else False
        registered_s = time.perf_counter() - start
        if case.startswith("d2h"):
            buf.copy_(dev)
        else:
            dev.copy_(buf)
        torch.cuda.synchronize()
    return {"s": time.perf_counter() - start, "register_s": registered_s, "pinned": pinned}


def arena_results(mib: int, repeats: int) -> dict:
    """Each case `repeats` times, each time in a new process, through one arena in /dev/shm."""
    path = Path("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
    arena = path / f"host_transfer_arena_{os.getpid()}"
    fd = os.open(arena, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, mib << 20)  # pages allocated once, as the judge's arena's are
    finally:
        os.close(fd)
    results = {}
    try:
        for case in ARENA_CASES:
            runs = []
            for _ in range(repeats):
                child = subprocess.run(
                    [sys.executable, "-m", "benchmarks.host_transfer", "--child", case,
                     "--arena", str(arena), "--mib", str(mib)],
                    capture_output=True, text=True, check=True, timeout=600,
                )  # fmt: skip
                runs.append(json.loads(child.stdout.strip().splitlines()[-1]))
            median = statistics.median(r["s"] for r in runs)
            results[f"arena_{case}"] = {
                "median_s": median,
                "all_s": [r["s"] for r in runs],
                "register_median_s": statistics.median(r["register_s"] for r in runs),
                "pinned": [r["pinned"] for r in runs],
                "gib_per_s": mib / 1024 / median,
            }
    finally:
        arena.unlink(missing_ok=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--arena-mib", type=int, default=0, help="also the arena cases (0: not)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out")
    parser.add_argument("--child", choices=ARENA_CASES, help=argparse.SUPPRESS)
    parser.add_argument("--arena", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("host_transfer needs a CUDA device")
    if args.child:
        print(json.dumps(arena_child(args.child, args.arena, args.mib)))
        return
    if not args.out:
        parser.error("--out is required")

    src = torch.randn(args.mib * 1024 * 1024 // 4, device="cuda")
    gib = args.mib / 1024
    pinned = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    host = src.cpu()
    results = {
        "pageable_fresh": seconds(lambda: src.to("cpu", copy=True), args.repeats),
        "pinned_reused": seconds(lambda: pinned.copy_(src), args.repeats),
    }
    for name, folder in (("save_tmp", tempfile.gettempdir()), ("save_dev_shm", "/dev/shm")):
        if not os.path.isdir(folder):
            continue
        path = Path(folder) / f"host_transfer_{os.getpid()}.pt"
        results[name] = seconds(lambda p=path: torch.save(host, p), args.repeats)
        results[name.replace("save", "load")] = seconds(
            lambda p=path: torch.load(p, weights_only=True), args.repeats
        )
        path.unlink(missing_ok=True)
    for row in results.values():
        row["gib_per_s"] = gib / row["median_s"]
    if args.arena_mib:
        results.update(arena_results(args.arena_mib, args.repeats))
    arena_flag = f" --arena-mib {args.arena_mib}" if args.arena_mib else ""
    report = {
        "command": f"python -m benchmarks.host_transfer --mib {args.mib}{arena_flag}"
        f" --out {args.out}",
        "device_name": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "mib": args.mib,
        "arena_mib": args.arena_mib,
        "results": results,
    }
    for name, row in results.items():
        print(f"{name:>16}: {row['median_s'] * 1e3:8.1f} ms  {row['gib_per_s']:6.2f} GiB/s")
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
