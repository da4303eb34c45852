"""Time every built-in task's eager and torch.compile baselines on one device; write JSON.

Run: python benchmarks/task_times.py --device cuda --out benchmarks/results/task_times_h200.json

Uses the judge's own timer (CUDA events around device-wide syncs, L2 flushed, TF32 off) in this
process, one task at a time.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from cuda_gym.judge.timing import Timer
from cuda_gym.tasks import builtin_task, builtin_task_ids


def time_task(task_id: str, device: str, warmup: int, runs: int) -> dict:
    task = builtin_task(task_id).for_device(device)
    namespace: dict = {}
    exec(compile(task.source, f"{task_id}.py", "exec"), namespace)
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]()).to(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in namespace["get_inputs"]()]
    timer = Timer(device)
    row = {"task_id": task_id, "task_hash": task.content_hash[:16]}
    row["input_mib"] = (
        sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor)) / 2**20
    )
    with torch.no_grad():
        row["eager"] = timer.time_ms(model, inputs, warmup, runs)
        start = time.monotonic()
        compiled = torch.compile(model)
        compiled(*inputs)
        row["compile_first_call_s"] = time.monotonic() - start
        row["compile"] = timer.time_ms(compiled, inputs, warmup, runs)
    row["compile_speedup"] = row["eager"]["median_ms"] / row["compile"]["median_ms"]
    del model, inputs, compiled
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tasks", nargs="*", default=None)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    for task_id in args.tasks or builtin_task_ids():
        row = time_task(task_id, args.device, args.warmup, args.runs)
        rows.append(row)
        print(
            f"{task_id:32s} eager {row['eager']['median_ms']:8.3f} ms  compile "
            f"{row['compile']['median_ms']:8.3f} ms  ({row['compile_speedup']:.2f}x)",
            flush=True,
        )
    result = {
        "command": "python benchmarks/task_times.py "
        + " ".join(f"--{k} {v}" for k, v in vars(args).items() if v is not None and k != "tasks"),
        "device": args.device,
        "device_name": torch.cuda.get_device_name()
        if args.device == "cuda"
        else platform.processor(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "tf32": False,
        "timing": "median of runs; CUDA events + device sync, L2 flushed per call"
        if args.device == "cuda"
        else "median host wall-clock",
        "tasks": rows,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
