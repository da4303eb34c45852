"""`cuda-gym synth` (also `python -m cuda_gym.synth`): synthesise and filter tasks.

    cuda-gym synth --n 20 --device cpu --seed 0 --out tasks.parquet
    cuda-gym synth --n 500 --device cuda --out DIR --decontaminate-against ~/KernelBench

Kept free of torch imports at module level; `cuda_gym/cli.py` imports it only to run `synth`.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_synth_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `cuda-gym synth` (one per SynthConfig field that users set)."""
    parser.add_argument("--n", type=int, default=20, help="accepted tasks wanted")
    parser.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cuda", "cpu"],
        help="device the tasks are sized and filtered for (auto: cuda when a GPU is visible)",
    )
    parser.add_argument("--seed", type=int, default=0, help="composer seed")
    parser.add_argument(
        "--out", required=True, help="a .parquet file, or a directory (tasks/*.py + parquet)"
    )
    parser.add_argument(
        "--decontaminate-against",
        metavar="DIR",
        help="drop tasks with AST similarity above the threshold to any problem in DIR",
    )
    parser.add_argument("--similarity-threshold", type=float, default=0.9)
    parser.add_argument(
        "--chain-lengths",
        default=None,
        help="weights of chain lengths, e.g. '1:0.06,2:0.82,3:0.08,4:0.03,5:0.01' (the default)",
    )
    parser.add_argument(
        "--family-weights",
        default=None,
        help="weights of operator families, e.g. 'conv:2,matmul:2,dropout:0'",
    )
    parser.add_argument(
        "--window-ms",
        type=float,
        nargs=2,
        metavar=("LOW", "HIGH"),
        help="eager-time window (default 1 100 on cuda, 0.3 100 on cpu)",
    )
    parser.add_argument("--workers", type=int, default=2, help="filter processes")
    parser.add_argument("--task-timeout-s", type=float, default=300.0)
    parser.add_argument("--max-candidates", type=int, default=None)
    parser.add_argument("--validation-fraction", type=float, default=0.1)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile filter")
    parser.add_argument(
        "--no-calibrate", action="store_true", help="do not rescale batch sizes to the window"
    )
    parser.add_argument(
        "--journal",
        metavar="JSONL",
        help="append every finished candidate here; a rerun with the same settings resumes",
    )
    parser.add_argument(
        "--time-limit-s",
        type=float,
        default=None,
        help="stop after this many seconds and write the tasks accepted so far",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace):
    """A SynthConfig from parsed flags."""
    from cuda_gym.errors import ConfigError
    from cuda_gym.judge.device import resolve_device
    from cuda_gym.synth.config import DEFAULT_FAMILY_WEIGHTS, SynthConfig, parse_chain_lengths

    kwargs = {}
    if args.chain_lengths:
        kwargs["chain_lengths"] = parse_chain_lengths(args.chain_lengths)
    if args.family_weights:
        weights = dict(DEFAULT_FAMILY_WEIGHTS)
        try:
            for part in args.family_weights.split(","):
                family, weight = part.split(":")
                weights[family.strip()] = float(weight)
        except ValueError as exc:
            raise ConfigError(
                f"--family-weights must look like 'conv:2,dropout:0', got {args.family_weights!r}"
            ) from exc
        kwargs["family_weights"] = weights
    return SynthConfig(
        n=args.n,
        device=resolve_device(args.device),
        seed=args.seed,
        window_ms=tuple(args.window_ms) if args.window_ms else None,
        compile_check=not args.no_compile,
        calibrate=not args.no_calibrate,
        decontaminate_against=args.decontaminate_against,
        similarity_threshold=args.similarity_threshold,
        workers=args.workers,
        task_timeout_s=args.task_timeout_s,
        max_candidates=args.max_candidates,
        validation_fraction=args.validation_fraction,
        journal=args.journal,
        time_limit_s=args.time_limit_s,
        **kwargs,
    )


def format_summary(summary: dict) -> str:
    """The run's summary as text tables: filters, chain lengths, families."""
    lines = [
        f"accepted {summary['n_accepted']} of {summary['candidates']} candidates "
        f"in {summary['elapsed_s']:.1f} s "
        f"({summary['tasks_per_minute'] or 0:.1f} tasks/min) on "
        f"{summary['environment']['device']} ({summary['environment']['device_name']})",
        "",
        f"{'filter':<18}{'reached':>9}{'passed':>9}{'rate':>8}",
    ]
    for name, s in summary["filters"].items():
        rate = f"{100 * s['pass_rate']:.0f}%" if s["pass_rate"] is not None else "-"
        lines.append(f"{name:<18}{s['reached']:>9}{s['passed']:>9}{rate:>8}")
    lines += ["", "chain length  tasks"]
    lines += [f"{k:>12}  {v:>5}" for k, v in summary["chain_lengths"].items()]
    lines += ["", "family        ops in accepted tasks"]
    lines += [f"{k:<14}{v:>5}" for k, v in summary["families"].items()]
    return "\n".join(lines)


def run_synth(args: argparse.Namespace) -> int:
    """Entry point of `cuda-gym synth`: run the pipeline, write the output, print the summary."""
    from cuda_gym.synth.pipeline import synthesize
    from cuda_gym.synth.store import write_output

    config = config_from_args(args)
    run = synthesize(config, progress=not args.no_progress)
    summary = run.summary()
    path = write_output(run.tasks, summary, args.out)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(format_summary(summary))
        print(f"\nwrote {len(run.tasks)} tasks to {path}")
    if len(run.tasks) < config.n:
        limit = (
            f"the {config.time_limit_s:g} s time limit (rerun with --journal to resume)"
            if run.stopped_by_time_limit
            else f"{config.candidate_limit} candidates"
        )
        print(
            f"warning: only {len(run.tasks)} of {config.n} tasks accepted within {limit}",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: list[str] | None = None, prog: str = "python -m cuda_gym.synth") -> int:
    """`python -m cuda_gym.synth ...` and `cuda-gym synth ...`: parse the flags, run."""
    import logging

    from cuda_gym.errors import CudaGymError

    parser = argparse.ArgumentParser(
        prog=prog,
        description="Synthesise and filter KernelBench-format tasks.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_synth_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        return run_synth(args)
    except CudaGymError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
