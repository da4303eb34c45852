"""Concurrency of envs in one process: cheap-tool latency under judging, judged solutions/minute.

For each concurrency level C (default 1, 8, 32), C threads each play episodes of the demo task
(write the demo kernel, submit) until `--solutions` submits are judged in total; the rate is
judged solutions per minute. Meanwhile a probe env reads a file every 50 ms and the benchmark
records that read's latency (median, p95, max) while the others judge. The first level's
builds and baselines warm the caches (reported as `warmup_s`).

    python -m benchmarks.concurrency --device cpu --levels 1 4 --solutions 8 \
        --out benchmarks/results/concurrency_cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym

import cuda_gym  # noqa: F401  (registers CudaKernel-v0)
from benchmarks.scripted_solutions import scripted_solution
from cuda_gym.demo import DEMO_TASK
from cuda_gym.judge import JudgeConfig
from cuda_gym.judge.device import device_info, resolve_device
from cuda_gym.runtime.zygote import zygote_failures


def play_one(device: str, env_kwargs: dict) -> dict:
    """One episode: write the solution, submit; returns reward, wait and judge seconds."""
    env = gym.make("CudaKernel-v0", device=device, task=DEMO_TASK, **env_kwargs)
    try:
        env.reset(seed=0)
        writes = [
            {"name": "write_file", "arguments": {"path": p, "content": c}}
            for p, c in scripted_solution(DEMO_TASK, device).items()
        ]
        env.step(writes)
        _, reward, _, _, info = env.step({"name": "submit", "arguments": {}})
        return {
            "reward": reward,
            "judge_wait_s": info["judge_wait_s"],
            "submit_s": info["timings"]["submit"],
        }
    finally:
        env.close()


def cheap_tool_probe(device: str, stop: threading.Event, env_kwargs: dict) -> list[float]:
    """read_file latencies (s) of one env, every 50 ms until stop is set."""
    env = gym.make(
        "CudaKernel-v0",
        device=device,
        task=DEMO_TASK,
        max_turns=10**9,
        judge_on_truncation=False,
        **env_kwargs,
    )
    env.reset(seed=0)
    latencies = []
    while not stop.is_set():
        start = time.perf_counter()
        *_, truncated, _ = env.step({"name": "read_file", "arguments": {"path": "model.py"}})
        latencies.append(time.perf_counter() - start)
        if truncated:  # the time budget ran out
            env.reset(seed=0)
        time.sleep(0.05)
    env.close()
    return latencies


def run_level(device: str, concurrency: int, solutions: int, env_kwargs: dict) -> dict:
    """Judge `solutions` submits with `concurrency` episodes at a time."""
    stop = threading.Event()
    with ThreadPoolExecutor(1) as probe_pool:
        probe = probe_pool.submit(cheap_tool_probe, device, stop, env_kwargs)
        start = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            episodes = list(pool.map(lambda _: play_one(device, env_kwargs), range(solutions)))
        elapsed = time.monotonic() - start
        stop.set()
        latencies = probe.result()
    lat_ms = sorted(1000 * x for x in latencies)
    return {
        "concurrency": concurrency,
        "solutions": solutions,
        "elapsed_s": round(elapsed, 2),
        "judged_per_minute": round(60 * solutions / elapsed, 2),
        "all_correct": all(e["reward"] >= 1 for e in episodes),
        "submit_s_median": round(statistics.median(e["submit_s"] for e in episodes), 3),
        "judge_wait_s_median": round(statistics.median(e["judge_wait_s"] for e in episodes), 3),
        "cheap_tool_ms": {
            "n": len(lat_ms),
            "median": round(statistics.median(lat_ms), 2),
            "p95": round(lat_ms[int(0.95 * (len(lat_ms) - 1))], 2),
            "max": round(lat_ms[-1], 2),
        },
    }


def main(argv: list[str] | None = None) -> dict:
    """Run every level, print and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--solutions", type=int, default=32, help="submits judged per level")
    parser.add_argument("--timed-slots", type=int, default=None)
    parser.add_argument("--untimed-slots", type=int, default=None)
    parser.add_argument(
        "--fast-worker-start",
        action="store_true",
        help="fork judge workers from a warm process (default: JudgeConfig's, on for CUDA)",
    )
    parser.add_argument("--out", default="benchmarks/results/concurrency.json")
    args = parser.parse_args(argv)
    failures_before = len(zygote_failures())  # this run's only (the list is per process)
    device = resolve_device(args.device)
    slots = {
        "timed_judge_slots": args.timed_slots,
        "untimed_judge_slots": args.untimed_slots,
    }
    env_kwargs = dict(slots)
    if args.fast_worker_start:
        env_kwargs["judge"] = JudgeConfig(device=device, fast_worker_start=True)
    start = time.monotonic()
    warm = play_one(device, env_kwargs)  # builds the kernel and times the baselines once
    report = {
        "benchmark": "concurrency",
        "command": " ".join(["python -m benchmarks.concurrency", *(argv or sys.argv[1:])]),
        "device": device_info(device).to_dict(),
        "host": platform.node(),
        "task": DEMO_TASK,
        "warmup_s": round(time.monotonic() - start, 2),
        "warmup_reward": warm["reward"],
        "slots": slots,
        # As the env resolves it: the flag, else JudgeConfig's default (on for CUDA).
        "fast_worker_start": JudgeConfig(
            device=device, fast_worker_start=True if args.fast_worker_start else None
        ).forks_workers,
        "levels": [],
    }
    for level in args.levels:
        result = run_level(device, level, max(args.solutions, level), env_kwargs)
        print(json.dumps(result))
        report["levels"].append(result)
    # Whether forked workers really served (a zygote that cannot falls back to fresh ones).
    report["zygote_failures"] = zygote_failures()[failures_before:]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
