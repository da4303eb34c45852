"""Throughput of the data-synthesis pipeline: tasks synthesised and filtered per minute.

Runs `cuda_gym.synth.synthesize` and writes the run's summary (tasks and candidates per minute,
pass rate of each filter, chain-length and family distributions, versions) as JSON:

    python -m benchmarks.synth --device cuda --n 100 --workers 8 --out $OUT/synth_h200.json
    python -m benchmarks.synth --device cpu --n 20 --out benchmarks/results/synth_cpu.json
    python -m benchmarks.synth --describe cuda_gym/tasks/data/synth_builtin.parquet  # README table
    python -m benchmarks.synth --verify cuda_gym/tasks/data/synth_builtin.parquet --device cuda \
        --workers 8 --out $OUT/synth_builtin_verify_h200.json  # re-run every filter on a set
    python -m benchmarks.synth --journal-stats JOURNAL.jsonl[.gz] --out FILE.json
        # each filter's pass rate from a run's journal, out-of-memory failures set apart
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from collections import Counter
from pathlib import Path

from cuda_gym.synth.config import SynthConfig
from cuda_gym.synth.pipeline import synthesize
from cuda_gym.tasks import load_task_parquet


def describe(path: str) -> str:
    """Markdown tables of a task set's chain lengths, operator families and splits."""
    tasks = load_task_parquet(path)
    meta = [tasks.meta[i] for i in tasks.ids()]
    lengths = Counter(m["chain_length"] for m in meta)
    families = Counter(f for m in meta for f in set(m["families"]))
    splits = Counter(m["split"] for m in meta)
    devices = Counter(m["provenance"]["device_name"] for m in meta)
    n = len(meta)
    lines = [
        f"{n} tasks; splits: "
        + ", ".join(f"{k} {v}" for k, v in sorted(splits.items()))
        + "; generated on "
        + ", ".join(f"{k} ({v})" for k, v in devices.items()),
        "",
        "| chain length | tasks | share |",
        "|---|---|---|",
    ]
    lines += [f"| {k} | {v} | {100 * v / n:.1f} % |" for k, v in sorted(lengths.items())]
    lines += ["", "| operator family | tasks using it | share |", "|---|---|---|"]
    lines += [f"| {k} | {v} | {100 * v / n:.1f} % |" for k, v in families.most_common()]
    return "\n".join(lines)


def verify(path: str, device: str, workers: int, compile_check: bool) -> dict:
    """Re-run the execution filters (no calibration) on every task of a parquet set."""
    from cuda_gym.synth.filters import FilterSettings, FixedSource
    from cuda_gym.synth.pipeline import default_pool

    tasks = load_task_parquet(path)
    config = SynthConfig(n=1, device=device, workers=workers, compile_check=compile_check)
    settings = FilterSettings(device=device, window_ms=config.window, compile_check=compile_check)
    pool = default_pool(config)
    start = time.monotonic()
    try:
        for task in tasks:
            pool.submit(task.task_id, (FixedSource(task.source), settings))
        results = [pool.next_result() for _ in range(len(tasks))]
    finally:
        pool.close()
    failures = {}
    eager, compiled = [], []
    for r in results:
        if not r.ok:
            failures[r.key] = r.error[-300:]
        elif not r.value.accepted:
            failures[r.key] = {r.value.failed: r.value.filters.get(r.value.failed)}
        else:
            eager.append(r.value.eager_ms)
            if r.value.compile_ms:
                compiled.append(r.value.compile_ms)
    return {
        "benchmark": "synth-verify",
        "set": path,
        "device": device,
        "window_ms": list(config.window),
        "tasks": len(tasks),
        "passed": len(tasks) - len(failures),
        "failures": failures,
        "eager_ms_min_median_max": _spread(eager),
        "compile_ms_min_median_max": _spread(compiled),
        "wall_s": time.monotonic() - start,
    }


def journal_stats(path: str) -> dict:
    """Each filter's pass rate over a journal's candidates, out-of-memory failures set apart.

    Runs before the out-of-memory retry (cuda_gym.synth.pipeline.RESOURCE_RETRIES) recorded
    running out of device memory as the failure of whichever filter was running; here such a
    candidate counts as `resource` (it reached no verdict) and its filter as not reached.
    """
    from cuda_gym.synth.filters import RESOURCE, is_out_of_memory
    from cuda_gym.synth.pipeline import filter_stats

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        records = [json.loads(line)["record"] for line in f if line.strip()]
    per_candidate = []
    for rec in records:
        filters = dict(rec["filters"])
        failed = rec.get("failed")
        if failed and failed != RESOURCE and is_out_of_memory(json.dumps(filters.get(failed))):
            filters.pop(failed)
            filters[RESOURCE] = {"passed": False}
        per_candidate.append(filters)
    stats = filter_stats(per_candidate)
    return {
        "benchmark": "synth-journal-stats",
        "journal": path,
        "candidates": len(records),
        "accepted_before_near_duplicates": sum(bool(r.get("accepted")) for r in records),
        "out_of_memory": stats.get(RESOURCE, {}).get("reached", 0),
        "filters": stats,
    }


def _spread(values: list[float]) -> list[float] | None:
    if not values:
        return None
    values = sorted(values)
    return [values[0], values[len(values) // 2], values[-1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/synth_cpu.json")
    parser.add_argument("--describe", metavar="PARQUET", help="print a set's tables and exit")
    parser.add_argument("--verify", metavar="PARQUET", help="re-run the filters on a set")
    parser.add_argument("--journal-stats", metavar="JOURNAL", help="filter rates of a journal")
    args = parser.parse_args()
    if args.journal_stats:
        text = json.dumps(journal_stats(args.journal_stats), indent=2)
        print(text)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
        return
    if args.describe:
        print(describe(args.describe))
        return
    if args.verify:
        result = verify(args.verify, args.device, args.workers, not args.no_compile)
        text = json.dumps(result, indent=2, default=str)
        print(text)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
        return

    config = SynthConfig(
        n=args.n,
        device=args.device,
        seed=args.seed,
        workers=args.workers,
        compile_check=not args.no_compile,
    )
    start = time.monotonic()
    run = synthesize(config, progress=True)
    wall_s = time.monotonic() - start
    summary = run.summary()
    worker_s = [r["worker_s"] for r in run.records if r.get("worker_s")]
    minutes = wall_s / 60
    result = {
        "benchmark": "synth",
        "command": f"python -m benchmarks.synth --device {args.device} --n {args.n} "
        f"--workers {args.workers}" + (" --no-compile" if args.no_compile else ""),
        "config": {
            "n": config.n,
            "seed": config.seed,
            "workers": config.workers,
            "window_ms": list(config.window),
            "compile_check": config.compile_check,
            "cpu_count": os.cpu_count(),
        },
        "wall_s": wall_s,
        "tasks_per_minute": len(run.tasks) / minutes,
        "candidates_per_minute": len(run.records) / minutes,
        # On one GPU the wall-clock minute is the GPU-minute (the GPU is held for the run).
        "tasks_per_device_minute": len(run.tasks) / minutes,
        "mean_worker_s_per_candidate": sum(worker_s) / len(worker_s) if worker_s else None,
        "summary": summary,
    }
    text = json.dumps(result, indent=2, default=str)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
