"""The `cuda-gym` command line: demo, judge, tasks.

Usage::

    cuda-gym demo [--device auto|cuda|cpu] [--task ID] [--json]
    cuda-gym judge TASK SOLUTION.py|WORKSPACE [--kernels DIR] [--device ...] [--mode ...]
                   [--reward ...]
    cuda-gym tasks list [--json]
    cuda-gym synth --n N --device cuda|cpu --seed S --out DIR_OR_FILE.parquet [...]
    cuda-gym prepare --tasks SOURCE [--device ...] [--workers N] [--limit N] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from cuda_gym.errors import CudaGymError


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def cmd_demo(args: argparse.Namespace) -> int:
    """Play the scripted demo episode."""
    from cuda_gym.demo import SCRIPTED_TASKS, run_demo

    if args.task not in SCRIPTED_TASKS:
        print(
            f"error: the scripted demo agent has solutions for {', '.join(SCRIPTED_TASKS)} only, "
            f"not {args.task!r}",
            file=sys.stderr,
        )
        return 2
    result = run_demo(device=args.device, task_id=args.task)
    if args.json:
        _print_json(result.summary())
    else:
        for turn in result.transcript:
            banner = "AGENT" if turn["role"] == "agent" else "ENV"
            print(f"\n===== {banner} " + "=" * 60)
            print(turn["text"])
        print("\n===== RESULT " + "=" * 59)
        _print_json(result.summary())
    return 0 if result.reward >= 1 else 1


def cmd_judge(args: argparse.Namespace) -> int:
    """Judge a KernelBench-format solution file against a task file."""
    from cuda_gym.judge import Judge, JudgeConfig
    from cuda_gym.judge.device import resolve_device
    from cuda_gym.tasks import load_task

    device = resolve_device(args.device)
    task = load_task(args.task).for_device(device)
    config = JudgeConfig(device=device, tolerance_mode=args.mode, reward=args.reward)
    solution = Path(args.solution)
    kernels = args.kernels
    if solution.is_dir():  # a workspace: model_new.py and, if present, kernels/
        kernels = kernels or (solution / "kernels" if (solution / "kernels").is_dir() else None)
        solution = solution / "model_new.py"
    if not solution.is_file():
        print(f"error: no solution file at {solution}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="cuda_gym_cli_") as tmp:
        shutil.copyfile(solution, Path(tmp) / "model_new.py")
        if kernels:
            shutil.copytree(kernels, Path(tmp) / "kernels")
        verdict = Judge(config).evaluate(task, tmp, timing=not args.no_timing)
    result = verdict.to_dict()
    if args.json:
        _print_json(result)
    else:
        for key in (
            "verdict",
            "reward",
            "compiled",
            "correct",
            "speedup_vs_eager",
            "speedup_vs_compile",
            "time_ms",
            "max_abs_error",
            "error",
        ):
            print(f"{key:>20}: {result[key]}")
    return 0


def cmd_tasks_list(args: argparse.Namespace) -> int:
    """List the built-in tasks."""
    from cuda_gym.tasks import builtin_task, builtin_task_ids

    rows = []
    for task_id in builtin_task_ids():
        task = builtin_task(task_id)
        rows.append(
            {"task_id": task_id, "description": task.description, "hash": task.content_hash[:16]}
        )
    if args.json:
        _print_json(rows)
    else:
        width = max(len(r["task_id"]) for r in rows)
        for r in rows:
            print(f"{r['task_id']:<{width}}  {r['description']}")
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    """Synthesise and filter tasks (cuda_gym/synth)."""
    from cuda_gym.synth.cli import run_synth

    return run_synth(args)


# -- prepare: probes and baselines of a task set, ahead of training (cuda_gym/judge/prepare.py) --


def cmd_prepare(args: argparse.Namespace) -> int:
    """Probe a task set and time its baselines into the cache, ahead of the episodes."""
    from cuda_gym.judge import JudgeConfig
    from cuda_gym.judge.device import resolve_device
    from cuda_gym.judge.prepare import prepare_tasks
    from cuda_gym.tasks import resolve_task_source

    device = resolve_device(args.device)
    tasks = resolve_task_source(args.tasks, device).tasks[: args.limit]
    report = prepare_tasks(tasks, JudgeConfig(device=device), workers=args.workers)
    summary = report.summary()
    if args.json:
        _print_json(summary)
    else:
        print(
            f"prepared {summary['tasks']} tasks in {summary['duration_s']} s: "
            f"{summary['probed']} probed, {summary['baselined']} baselined, "
            f"{summary['already_cached']} already cached, {len(summary['failed'])} failed"
        )
        for task_id, error in summary["failed"].items():
            print(f"  {task_id}: {error}", file=sys.stderr)
    return 0 if report.ok else 1


def add_prepare_parser(sub) -> None:
    """The `prepare` subcommand."""
    prepare = sub.add_parser(
        "prepare", help="probe a task set and time its baselines ahead of training"
    )
    prepare.add_argument(
        "--tasks",
        required=True,
        help="task source: auto, builtin, synth[:SPLIT], kernelbench:PATH:LEVEL, a .parquet "
        "file or a directory of tasks",
    )
    prepare.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    prepare.add_argument("--workers", type=int, default=1, help="tasks prepared at once")
    prepare.add_argument("--limit", type=int, default=None, help="the first N tasks only")
    prepare.add_argument("--json", action="store_true", help="print the summary as JSON")
    prepare.set_defaults(func=cmd_prepare)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `cuda-gym`."""
    parser = argparse.ArgumentParser(prog="cuda-gym", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo",
        help="play a scripted episode (inspect, write, compile, run, "
        "profile, submit) and print the transcript and result",
    )
    demo.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    demo.add_argument("--task", default="sigmoid_gated_multiply", help="built-in task id")
    demo.add_argument("--json", action="store_true", help="print one JSON object only")
    demo.set_defaults(func=cmd_demo)

    judge = sub.add_parser("judge", help="judge a KernelBench-format solution against a task")
    judge.add_argument(
        "task", help="task file (class Model, get_inputs, get_init_inputs) or a built-in task id"
    )
    judge.add_argument(
        "solution",
        help="solution file defining class ModelNew, or a workspace directory (model_new.py, "
        "kernels/)",
    )
    judge.add_argument("--kernels", help="directory of kernel sources, built as kernels_ext")
    judge.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    judge.add_argument(
        "--mode",
        default="strict",
        choices=["strict", "kernelbench", "paper"],
        help="precision mode (default: strict)",
    )
    judge.add_argument(
        "--reward",
        default="milestone",
        choices=["milestone", "speedup", "log_speedup"],
        help="reward function (default: milestone)",
    )
    judge.add_argument("--no-timing", action="store_true", help="check correctness only")
    judge.add_argument("--json", action="store_true", help="print the verdict as JSON")
    judge.set_defaults(func=cmd_judge)

    tasks = sub.add_parser("tasks", help="task sets")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True)
    tasks_list = tasks_sub.add_parser("list", help="list the built-in tasks")
    tasks_list.add_argument("--json", action="store_true")
    tasks_list.set_defaults(func=cmd_tasks_list)

    from cuda_gym.synth.cli import add_synth_arguments

    synth = sub.add_parser("synth", help="synthesise and filter KernelBench-format tasks")
    add_synth_arguments(synth)
    synth.set_defaults(func=cmd_synth)

    add_prepare_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `cuda-gym` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    try:
        return args.func(args)
    except (CudaGymError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
