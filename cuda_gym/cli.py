"""The `cuda-gym` command line: demo, judge, tasks, play, cache, synth.

Usage (also `python -m cuda_gym ...`)::

    cuda-gym demo [--device auto|cuda|cpu] [--task ID] [--json]
    cuda-gym judge TASK SOLUTION.py|WORKSPACE [--kernels DIR] [--device ...] [--tolerance-mode ...]
                   [--rules external|env]
    cuda-gym tasks list [--source SOURCE] [--json]
    cuda-gym tasks show ID [--source SOURCE] [--device any|cuda|cpu]
    cuda-gym play --base-url URL --model NAME (--task ID | --tasks SOURCE) --episodes N --out DIR
    cuda-gym cache info [--json] | cuda-gym cache clear [--baselines|--builds|--all]
    cuda-gym synth --n N --device auto|cuda|cpu --seed S --out DIR_OR_FILE.parquet [...]
    cuda-gym prepare --tasks SOURCE [--device ...] [--workers N] [--limit N] [--json]

Modules are imported inside the commands, so `cuda-gym --help` does not load torch.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cuda_gym.errors import CudaGymError

DEVICES = ["auto", "cuda", "cpu"]
DEVICE_HELP = "where kernels run (auto: cuda when a GPU is usable, else cpu)"
EPILOG = (
    "Builds, baseline timings, probes and torch.compile caches live under $CUDA_GYM_CACHE "
    "(default ~/.cache/cuda_gym); `cuda-gym cache info` shows them. Exit codes: 0 success "
    "(judge: accept), 1 failure (judge: reject; demo: reward below 1), 2 usage or "
    "infrastructure error."
)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except for flags and options without one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False):
            return action.help or ""
        return super()._get_help_string(action)


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _status(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- demo ----------------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    """Play the scripted demo episode, printing each turn as it happens."""
    from cuda_gym.demo import SCRIPTED_TASKS, run_demo, scripted_step_count

    if args.task not in SCRIPTED_TASKS:
        print(
            f"error: the scripted demo agent has solutions for {', '.join(SCRIPTED_TASKS)} only, "
            f"not {args.task!r}; judge your own solution for any task with `cuda-gym judge`",
            file=sys.stderr,
        )
        return 2
    steps = scripted_step_count()
    print(
        f"cuda-gym demo: task {args.task} on device {args.device}; {steps} scripted steps; "
        "each judged step (compile, run, profile, submit) takes 10-60 s on an idle machine",
        file=sys.stderr if args.json else sys.stdout,
        flush=True,
    )

    def on_turn(role: str, text: str) -> None:
        if args.json:
            return
        banner = "AGENT" if role == "agent" else "ENV"
        print(f"\n===== {banner} " + "=" * 60 + f"\n{text}", flush=True)

    def on_step(step: int, info: dict, seconds: float) -> None:
        _status(f"[step {step}/{steps}] {_step_status(info, seconds)}")

    result = run_demo(device=args.device, task_id=args.task, on_turn=on_turn, on_step=on_step)
    if not args.json:
        print("\n===== RESULT " + "=" * 59)
    _print_json(result.summary())
    return 0 if result.reward >= 1 else 1


def _step_status(info: dict, seconds: float) -> str:
    """One line on a step: its tools, seconds, whether the build was cached, correct or not."""
    parts = []
    # A result's data may carry a "name" of its own (read_skill's skill): the call names the tool.
    calls = info.get("tool_calls", [])
    for call, r in zip(calls, info.get("tool_results", [])):
        tool = call["name"]
        text = tool + (" (invalid)" if r.get("invalid") else "")
        cached = r.get("cached", r.get("build_cached"))
        if tool in ("compile", "run", "profile", "submit") and cached is not None:
            text += f" [build {'cached' if cached else 'fresh'}]"
        if r.get("correct") is not None and tool != "compile":
            text += " correct" if r["correct"] else " incorrect"
        parts.append(text)
    line = f"{', '.join(parts) or 'no tool call'} in {seconds:.1f} s"
    if info.get("stop_reason"):
        line += f"; episode over ({info['stop_reason']})"
    return line


# -- judge ---------------------------------------------------------------------------------------


def cmd_judge(args: argparse.Namespace) -> int:
    """Judge a KernelBench-format solution file against a task; exit 0 accept, 1 reject."""
    from cuda_gym.judge import Judge, JudgeConfig
    from cuda_gym.judge.device import resolve_device
    from cuda_gym.judge.judge import copy_sources
    from cuda_gym.tasks.catalog import find_task

    solution = Path(args.solution)
    kernels = args.kernels
    if solution.is_dir():  # a workspace: model_new.py and, if present, kernels/
        kernels = kernels or (solution / "kernels" if (solution / "kernels").is_dir() else None)
        solution = solution / "model_new.py"
    if not solution.is_file():
        print(f"error: no solution file at {solution}", file=sys.stderr)
        return 2
    device = resolve_device(args.device)
    task = find_task(args.task, args.source).for_device(device)
    config = JudgeConfig(
        device=device, tolerance_mode=args.tolerance_mode, reward=args.reward, code_rules=args.rules
    )
    if not args.json:
        _status(f"judging {solution} against {task.task_id} on {device} ...")
    with tempfile.TemporaryDirectory(prefix="cuda_gym_cli_") as tmp:
        shutil.copyfile(solution, Path(tmp) / "model_new.py")
        # The C/C++/CUDA files beside it (and in csrc/, src/, ...), which it may build.
        copy_sources(solution.parent, Path(tmp))
        if kernels:
            # Links stay links: the judge copies regular files only (a verdict's not_copied).
            shutil.copytree(kernels, Path(tmp) / "kernels", symlinks=True)
        verdict = Judge(config).evaluate(task, tmp, timing=not args.no_timing)
    from cuda_gym.tools.report import log_judge_stages

    log_judge_stages(verdict)
    if args.json:
        _print_json(verdict.to_dict())
    else:
        print(format_verdict(verdict))
    return 0 if verdict.verdict == "accept" else 1


def format_verdict(verdict) -> str:
    """The text report of `cuda-gym judge`: verdict, reward, speedups, failing check, errors."""
    from cuda_gym.tools.report import clean_error

    def num(value, unit=""):
        return "n/a" if value is None else f"{value:.4g}{unit}"

    t = verdict.time_ms
    failed = [name for name, ok in verdict.checks.items() if ok is False]
    lines = [
        f"verdict   {verdict.verdict} (reward {verdict.reward:g}, {verdict.reward_kind})",
        f"mode      {verdict.tolerance_mode} precision on {verdict.device} ({verdict.device_name})",
        f"compiled  {verdict.compiled}   correct {verdict.correct}   stopped at stage "
        f"'{verdict.stage}'",
        f"speedup   vs eager {num(verdict.speedup_vs_eager, 'x')}   vs torch.compile "
        f"{num(verdict.speedup_vs_compile, 'x')}",
        f"time      candidate {num(t.get('candidate'), ' ms')}   eager "
        f"{num(t.get('eager'), ' ms')}   compile {num(t.get('compile'), ' ms')}",
    ]
    if verdict.max_abs_error is not None:
        lines.append(
            f"error     max abs {verdict.max_abs_error:.3g}   max rel "
            f"{num(verdict.max_rel_error)}   over {verdict.trials} input sets"
        )
    if failed:
        lines.append(f"failed    {', '.join(failed)}")
    if verdict.violations:
        lines.append("violations")
        lines += [f"  - {v}" for v in verdict.violations]
    if verdict.error:
        lines.append("message")
        lines += [f"  {line}" for line in clean_error(verdict.error).splitlines()]
    return "\n".join(lines)


# -- tasks ---------------------------------------------------------------------------------------


def cmd_tasks_list(args: argparse.Namespace) -> int:
    """List the tasks of one source, or of all built-in sources."""
    from cuda_gym.tasks.catalog import open_sources

    rows = []
    for task_set in open_sources(args.source):
        for task in task_set:
            meta = task_set.meta.get(task.task_id, {})
            rows.append(
                {
                    "task_id": task.task_id,
                    "source": task_set.name,
                    "split": meta.get("split"),
                    "description": task.description,
                    "hash": task.content_hash[:16],
                }
            )
    if args.json:
        _print_json(rows)
        return 0
    width = max((len(r["task_id"]) for r in rows), default=0)
    for r in rows:
        print(f"{r['task_id']:<{width}}  {r['source']:<10} {r['description']}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["source"]] = counts.get(r["source"], 0) + 1
    summary = ", ".join(f"{n} {name}" for name, n in counts.items())
    _status(f"{len(rows)} tasks ({summary or 'none'})")
    return 0


def cmd_tasks_show(args: argparse.Namespace) -> int:
    """Print one task's source (for a device, or as stored)."""
    from cuda_gym.tasks.catalog import find_task

    task = find_task(args.task_id, args.source)
    if args.device != "any":
        task = task.for_device(args.device)
    _status(f"# {task.task_id} (from {task.origin}; device {task.device})")
    print(task.source.rstrip())
    return 0


# -- play, cache, synth --------------------------------------------------------------------------


def cmd_play(args: argparse.Namespace) -> int:
    """Run an OpenAI-compatible model through episodes and write trajectories and a summary."""
    from cuda_gym.agents.play import PlayConfig, play

    config = PlayConfig(
        base_url=args.base_url,
        model=args.model,
        api_key_env=args.api_key_env,
        task=args.task,
        source=args.source,
        tasks=args.tasks,
        episodes=args.episodes,
        out=args.out,
        device=args.device,
        tool_mode=args.tool_mode,
        max_turns=args.max_turns,
        seed=args.seed,
        max_retries=args.max_retries,
        progress=not args.no_progress,
    )
    summary = play(config)
    print(summary["table"])
    _status(f"wrote {summary['episodes']} trajectories and summary.md/.json to {args.out}")
    return 0 if summary["errors"] == 0 else 1


def cmd_cache(args: argparse.Namespace) -> int:
    """Show or clear the on-disk caches."""
    from cuda_gym.cache import cache_report, clear_cache, format_report

    if args.cache_command == "clear":
        kinds = (
            "all"
            if args.all
            else [k for k, flag in (("baselines", args.baselines), ("builds", args.builds)) if flag]
        )
        if not kinds:
            print("error: say what to clear: --baselines, --builds or --all", file=sys.stderr)
            return 2
        for path, size in clear_cache(kinds):
            print(f"removed {path} ({size / 2**20:.1f} MiB)")
        return 0
    report = cache_report()
    if args.json:
        _print_json(report)
    else:
        print(format_report(report))
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    """Synthesise and filter tasks: `cuda_gym.synth.cli` parses its own flags."""
    from cuda_gym.synth.cli import main as synth_main

    return synth_main(args.synth_args, prog="cuda-gym synth")


# -- parser --------------------------------------------------------------------------------------


def _version() -> str:
    from cuda_gym import __version__

    return f"cuda-gym {__version__}"


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
    from cuda_gym.tasks.catalog import SOURCE_HELP

    fmt = _HelpFormatter
    parser = argparse.ArgumentParser(
        prog="cuda-gym", description=__doc__.splitlines()[0], epilog=EPILOG
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log the judge's stages and progress"
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        formatter_class=fmt,
        help="play a scripted episode (inspect, write, compile, run, profile, submit), "
        "printing each turn as it happens; takes 1-4 minutes on an idle machine",
    )
    demo.add_argument("--device", default="auto", choices=DEVICES, help=DEVICE_HELP)
    demo.add_argument(
        "--task",
        default="sigmoid_gated_multiply",
        help="the task; the scripted agent has a solution for sigmoid_gated_multiply only",
    )
    demo.add_argument("--json", action="store_true", help="print only the result as JSON")
    demo.set_defaults(func=cmd_demo)

    judge = sub.add_parser(
        "judge",
        formatter_class=fmt,
        help="judge a KernelBench-format solution against a task (exit 0 accept, 1 reject)",
    )
    judge.add_argument(
        "task",
        help="a task file (class Model, get_inputs, get_init_inputs) or a task id from any "
        "source (hand-written, the shipped synthesised set, or --source)",
    )
    judge.add_argument(
        "solution",
        help="solution file defining class ModelNew, or a workspace directory (model_new.py, "
        "kernels/)",
    )
    judge.add_argument("--source", help=f"where to find the task id: {SOURCE_HELP}")
    judge.add_argument("--kernels", help="directory of kernel sources, built as kernels_ext")
    judge.add_argument("--device", default="auto", choices=DEVICES, help=DEVICE_HELP)
    judge.add_argument(
        "--tolerance-mode",
        "--mode",  # the old name, kept as an alias
        dest="tolerance_mode",
        default="strict",
        choices=["strict", "kernelbench", "paper"],
        help="precision (--mode is a deprecated alias)",
    )
    judge.add_argument(
        "--reward", default="milestone", choices=["milestone", "speedup", "log_speedup"]
    )
    judge.add_argument(
        "--rules",
        default="external",
        choices=["external", "env"],
        help="static rule set for the solution's Python: external (default; code written "
        "elsewhere: os without process control, pathlib, logging, ... allowed) or env (the "
        "environment's stricter rules, as the agent is told them)",
    )
    judge.add_argument("--no-timing", action="store_true", help="check correctness only")
    judge.add_argument("--json", action="store_true", help="print the verdict as JSON")
    judge.set_defaults(func=cmd_judge)

    tasks = sub.add_parser("tasks", help="list and show tasks of every source")
    tasks.set_defaults(func=lambda _args: tasks.print_help() or 0)
    tasks_sub = tasks.add_subparsers(dest="tasks_command", metavar="{list,show}")
    tasks_list = tasks_sub.add_parser("list", formatter_class=fmt, help="list tasks")
    tasks_list.add_argument("--source", default="all", help=SOURCE_HELP)
    tasks_list.add_argument("--json", action="store_true", help="print JSON rows")
    tasks_list.set_defaults(func=cmd_tasks_list)
    tasks_show = tasks_sub.add_parser("show", formatter_class=fmt, help="print a task's code")
    tasks_show.add_argument("task_id", help="a task id from any source, or a task file")
    tasks_show.add_argument("--source", help=f"where to find the id: {SOURCE_HELP}")
    tasks_show.add_argument(
        "--device", default="any", choices=["any", "cuda", "cpu"], help="sizes for this device"
    )
    tasks_show.set_defaults(func=cmd_tasks_show)

    play = sub.add_parser(
        "play",
        formatter_class=fmt,
        help="run a model behind an OpenAI-compatible endpoint through episodes",
    )
    play.add_argument("--base-url", required=True, help="API root, e.g. http://localhost:8000/v1")
    play.add_argument("--model", required=True, help="served model name")
    play.add_argument(
        "--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key"
    )
    which = play.add_mutually_exclusive_group(required=True)
    which.add_argument("--task", help="play this task id in every episode")
    which.add_argument("--tasks", metavar="SOURCE", help=f"sample tasks from {SOURCE_HELP}")
    play.add_argument("--source", help="where to find the --task id (a source as for --tasks)")
    play.add_argument("--episodes", type=int, default=1)
    play.add_argument("--out", required=True, help="directory for trajectories and the summary")
    play.add_argument("--device", default="auto", choices=DEVICES, help=DEVICE_HELP)
    play.add_argument("--tool-mode", default="native", choices=["native", "text"])
    play.add_argument("--max-turns", type=int, default=30, help="turns per episode")
    play.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    play.add_argument(
        "--max-retries", type=int, default=4, help="further attempts of a failed request"
    )
    play.add_argument("--no-progress", action="store_true", help="no progress bar")
    play.set_defaults(func=cmd_play)

    cache = sub.add_parser("cache", help="show or clear the caches under $CUDA_GYM_CACHE")
    cache.set_defaults(func=lambda _args: cache.print_help() or 0)
    cache_sub = cache.add_subparsers(dest="cache_command", metavar="{info,clear}")
    info = cache_sub.add_parser("info", help="what is cached where, and its size")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=cmd_cache)
    clear = cache_sub.add_parser("clear", help="delete cached baselines, builds, or everything")
    clear.add_argument("--baselines", action="store_true", help="baseline timings and probes")
    clear.add_argument("--builds", action="store_true", help="kernel builds and their PCHs")
    clear.add_argument("--all", action="store_true", help="the whole cache directory")
    clear.set_defaults(func=cmd_cache)

    # The synth flags are parsed by cuda_gym.synth.cli (importing it here would load torch).
    synth = sub.add_parser(
        "synth",
        add_help=False,
        help="synthesise and filter KernelBench-format tasks (`cuda-gym synth --help`)",
    )
    synth.set_defaults(func=cmd_synth)

    add_prepare_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `cuda-gym` console script."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "synth":
        args.synth_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    start = time.monotonic()
    try:
        return args.func(args)
    except (CudaGymError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`cuda-gym tasks list | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell tool killed by it
    except KeyboardInterrupt:
        print(f"\ninterrupted after {time.monotonic() - start:.0f} s", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
