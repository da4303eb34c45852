"""How fast a judge worker can hand a large GPU output to another process through the host.

The candidate worker copies every output to the host and saves it for the trusted reference
worker; with GiB-sized outputs that copy can dominate a judgement. This measures, for one
output of --mib MiB: a pageable `.to("cpu")` into fresh memory, a copy into a reused pinned
buffer, and `torch.save` of the host tensor to the temporary directory and to /dev/shm.

    python -m benchmarks.host_transfer --out benchmarks/results/host_transfer_h200.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("host_transfer needs a CUDA device")

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
    report = {
        "command": f"python -m benchmarks.host_transfer --mib {args.mib} --out {args.out}",
        "device_name": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "mib": args.mib,
        "results": results,
    }
    for name, row in results.items():
        print(f"{name:>16}: {row['median_s'] * 1e3:8.1f} ms  {row['gib_per_s']:6.2f} GiB/s")
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
