"""End-to-end step latency of `compile`, `run` and `profile` through the env, caches warm.

For each task (default: the demo task, eager ~2.1 ms on an H200; also `weighted_row_sum`, eager
~1.1 ms with 64 KiB of outputs to the demo's 1 GiB) one warm-up episode writes a correct solution
(benchmarks/scripted_solutions.py), then steps compile, run, profile and submit, which builds the
kernel and times the baselines. Then --repeats further episodes, each in a fresh env, play the same
steps; every env.step is timed wall-clock. The target: `run` + `profile` of a task whose eager time
is ~1-10 ms, baselines cached, within 5 s end to end (median over the episodes). The judge's stage
times come from the submit step's `info["verdict"]["stage_times_s"]`: the run and profile steps'
info carries the verdict's times and results but not its stage times.
--tasks takes the tasks that have a scripted solution (scripted_solutions.SOLVED_TASKS).

    python -m benchmarks.step_latency --device cuda --repeats 5 \
        --out benchmarks/results/step_latency_h200.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import torch

import cuda_gym  # noqa: F401  (registers CudaKernel-v0)
from benchmarks.scripted_solutions import SOLVED_TASKS, scripted_solution
from cuda_gym.demo import DEMO_TASK
from cuda_gym.judge import JudgeConfig
from cuda_gym.judge.device import device_info, resolve_device
from cuda_gym.runtime.zygote import zygote_failures

TARGET_S = 5.0
STEPS = ("write", "compile", "run", "profile", "submit")


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def play_episode(device: str, task_id: str, fast_worker_start: bool | None = None) -> dict:
    """One episode in a fresh env: write the solution, compile, run, profile, submit."""
    writes = [
        call("write_file", path=p, content=c) for p, c in scripted_solution(task_id, device).items()
    ]
    actions = [writes, call("compile"), call("run"), call("profile"), call("submit")]
    judge = JudgeConfig(device=device, fast_worker_start=fast_worker_start)
    env = gym.make("CudaKernel-v0", device=device, task=task_id, judge=judge)
    episode: dict = {"step_s": {}, "tool_s": {}, "judge_wait_s": {}}
    try:
        env.reset(seed=0)
        for name, action in zip(STEPS, actions):
            start = time.perf_counter()
            _, reward, _, _, info = env.step(action)
            episode["step_s"][name] = round(time.perf_counter() - start, 4)
            episode["tool_s"][name] = round(sum(info["timings"].values()), 4)
            episode["judge_wait_s"][name] = info["judge_wait_s"]
            result = info["tool_results"][-1]
            error = result.get("error") if isinstance(result, dict) else None
            # As it happens, so that a run cut by a time limit still shows where time went.
            print(
                f"  {name:8s} {episode['step_s'][name]:8.3f} s"
                + (f"  error: {str(error)[:600]}" if error else ""),
                flush=True,
            )
            if name == "compile":
                episode["compile_cached"] = result["cached"]
            elif name in ("run", "profile"):
                episode[f"{name}_correct"] = result["correct"]
        episode["time_ms"] = result["time_ms"]
        episode["reward"] = reward
        episode["stage_times_s"] = info["verdict"]["stage_times_s"]
    finally:
        env.close()
    episode["run_plus_profile_s"] = round(
        episode["step_s"]["run"] + episode["step_s"]["profile"], 4
    )
    return episode


def spread(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def measure_task(device: str, task_id: str, repeats: int, fast_worker_start: bool | None) -> dict:
    """A warm-up episode, then `repeats` episodes with builds and baselines cached."""
    print(f"{task_id}: warm-up episode", flush=True)
    warmup = play_episode(device, task_id, fast_worker_start)
    print(f"{task_id}: {repeats} episodes", flush=True)
    episodes = [play_episode(device, task_id, fast_worker_start) for _ in range(repeats)]
    return {
        "step_s": {s: spread([e["step_s"][s] for e in episodes]) for s in STEPS},
        "run_plus_profile_s": spread([e["run_plus_profile_s"] for e in episodes]),
        "all_correct": all(e["run_correct"] and e["profile_correct"] for e in episodes),
        "all_compiles_cached": all(e["compile_cached"] for e in episodes),
        "submit_stage_times_s_median": {
            stage: round(statistics.median(e["stage_times_s"].get(stage, 0.0) for e in episodes), 4)
            for stage in episodes[0]["stage_times_s"]
        },
        "warmup": warmup,
        "episodes": episodes,
    }


def git(*args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10, cwd=Path(__file__).parent
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def main(argv: list[str] | None = None) -> dict:
    """Measure every task, print a summary and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    parser.add_argument("--tasks", nargs="+", default=[DEMO_TASK], choices=SOLVED_TASKS)
    parser.add_argument("--repeats", type=int, default=5, help="episodes after the warm-up")
    parser.add_argument(
        "--fast-worker-start",
        action="store_true",
        help="fork judge workers from a warm process (default: JudgeConfig's, on for CUDA)",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    failures_before = len(zygote_failures())  # this run's only (the list is per process)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    device = resolve_device(args.device)
    dirty = git("status", "--porcelain", "--untracked-files=no")
    report = {
        "benchmark": "step_latency",
        "command": " ".join(["python -m benchmarks.step_latency", *(argv or sys.argv[1:])]),
        "device": device_info(device).to_dict(),
        "host": platform.node(),
        "torch": torch.__version__,
        "git_commit": git("rev-parse", "--short", "HEAD"),
        "git_dirty": None if dirty is None else bool(dirty),
        "tasks": args.tasks,
        "repeats": args.repeats,
        "fast_worker_start": JudgeConfig(
            device=device, fast_worker_start=True if args.fast_worker_start else None
        ).forks_workers,
        "target_run_plus_profile_s": TARGET_S,
        "results": {},
    }
    for task_id in args.tasks:
        result = measure_task(
            device, task_id, args.repeats, True if args.fast_worker_start else None
        )
        report["results"][task_id] = result
        print(f"{task_id} on {device} ({args.repeats} episodes, caches warm):")
        for step in STEPS:
            s, w = result["step_s"][step], result["warmup"]["step_s"][step]
            print(
                f"  {step:8} median {s['median']:7.3f} s  [{s['min']:.3f}, {s['max']:.3f}]"
                f"  warm-up {w:7.3f} s"
            )
        print(
            f"  run + profile median {result['run_plus_profile_s']['median']:.3f} s "
            f"(target {TARGET_S:g} s)"
        )
        stages = result["submit_stage_times_s_median"]
        print(
            "  submit's judge stages (median s): "
            + ", ".join(f"{k} {v:.3f}" for k, v in stages.items() if "." not in k)
        )
    report["meets_target"] = all(
        r["all_correct"] and r["run_plus_profile_s"]["median"] <= TARGET_S
        for r in report["results"].values()
    )
    print(f"meets target: {report['meets_target']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    # With --fast-worker-start, whether the workers really were forked (a zygote that cannot
    # serve falls back to starting them afresh, which these figures would then measure).
    report["zygote_failures"] = zygote_failures()[failures_before:]
    if report["fast_worker_start"] and report["zygote_failures"]:
        print("warning: the zygote did not serve (workers started afresh):")
        print("  " + report["zygote_failures"][0][:1500].replace("\n", "\n  "))
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
