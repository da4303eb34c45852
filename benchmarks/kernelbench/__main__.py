"""KernelBench harness: evaluate an agent, ready-made solutions, or the reference itself.

    python -m benchmarks.kernelbench --kernelbench-dir DIR --levels 1,2,3 \
        (--agent openai --model M | --agent scripted --solutions-dir S | --solutions-dir S \
         | --reference-as-solution) --device cuda|cpu \
        --tolerance-mode strict|paper|kernelbench --out OUT

Writes OUT/records/ (one JSON per problem; an interrupted run resumes where it stopped),
OUT/trajectories/ (agents), OUT/report.json, OUT/report.md and OUT/plots/.
"""

from __future__ import annotations

import argparse
import logging
import sys

from benchmarks.kernelbench.config import AGENTS, HarnessConfig
from benchmarks.kernelbench.runner import run
from cuda_gym.agents.openai_chat import TOOL_MODES
from cuda_gym.errors import CudaGymError
from cuda_gym.judge.config import MODES


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def parse_args(argv: list[str] | None = None) -> HarnessConfig:
    """Command-line flags -> HarnessConfig (see its docstring for every field)."""
    d = HarnessConfig.__dataclass_fields__
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.kernelbench", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--kernelbench-dir", required=True, help="KernelBench checkout or its KernelBench/"
    )
    p.add_argument("--out", required=True, help="output directory (resumed when it exists)")
    p.add_argument("--levels", type=_ints, default=d["levels"].default, help="e.g. 1,2,3")
    p.add_argument("--problems", default=None, help="only these ids or stems, comma-separated")
    p.add_argument("--limit", type=int, default=None, help="at most N problems per level")
    solver = p.add_argument_group("solver (choose one)")
    solver.add_argument("--agent", choices=AGENTS, default=None)
    solver.add_argument("--solutions-dir", default=None, help="level1/19_ReLU.py ... solutions")
    solver.add_argument("--trajectories-dir", default=None, help="for --agent replay")
    solver.add_argument(
        "--reference-as-solution",
        action="store_true",
        help="sanity run: each reference judged as its own candidate (speedups ~1.0)",
    )
    chat = p.add_argument_group("openai agent")
    chat.add_argument("--model", default=None)
    chat.add_argument("--base-url", default=None, help="default: $OPENAI_BASE_URL")
    chat.add_argument("--api-key-env", default=d["api_key_env"].default)
    chat.add_argument("--tool-mode", choices=TOOL_MODES, default=d["tool_mode"].default)
    chat.add_argument("--temperature", type=float, default=d["temperature"].default)
    chat.add_argument("--max-tokens", type=int, default=None)
    chat.add_argument("--request-timeout-s", type=float, default=d["request_timeout_s"].default)
    chat.add_argument("--max-retries", type=int, default=d["max_retries"].default)
    chat.add_argument("--max-turns", type=int, default=d["max_turns"].default)
    chat.add_argument("--time-budget-s", type=float, default=d["time_budget_s"].default)
    chat.add_argument("--seed", type=int, default=d["seed"].default)
    judge = p.add_argument_group("judging")
    judge.add_argument("--device", choices=("cuda", "cpu"), default=d["device"].default)
    judge.add_argument(
        "--tolerance-mode",
        "--mode",  # the old name, kept as an alias
        dest="tolerance_mode",
        choices=MODES,
        default=d["tolerance_mode"].default,
        help="precision (--mode is a deprecated alias)",
    )
    judge.add_argument("--warmup-runs", type=int, default=d["warmup_runs"].default)
    judge.add_argument("--timed-runs", type=int, default=d["timed_runs"].default)
    judge.add_argument("--correctness-trials", type=int, default=d["correctness_trials"].default)
    judge.add_argument("--allow-vendor-libraries", action="store_true")
    judge.add_argument(
        "--baselines",
        type=lambda t: tuple(x.strip() for x in t.split(",") if x.strip()),
        default=d["baselines"].default,
        help="eager,compile (default) or one of them",
    )
    judge.add_argument("--run-timeout-s", type=float, default=d["run_timeout_s"].default)
    judge.add_argument("--baselines-file", default=None, help="default: OUT/baselines.json")
    judge.add_argument(
        "--no-shipped-baselines",
        action="store_true",
        help="measure baselines, not taking those in benchmarks/kernelbench/baselines/",
    )
    judge.add_argument("--cache-dir", default=None, help="default: $CUDA_GYM_CACHE")
    judge.add_argument(
        "--fast-worker-start",
        action="store_true",
        help="fork judge workers from a warm process (JudgeConfig.fast_worker_start)",
    )
    run_group = p.add_argument_group("execution")
    run_group.add_argument("--workers", type=int, default=d["workers"].default)
    run_group.add_argument(
        "--gpus",
        type=_ints,
        default=None,
        help="GPUs the workers are spread over: 0,1 (workers: a multiple of their count)",
    )
    run_group.add_argument(
        "--max-wall-s", type=float, default=None, help="stop after N s; resume by running again"
    )
    run_group.add_argument("--no-plots", action="store_true")
    run_group.add_argument(
        "--report-only",
        action="store_true",
        help="judge nothing: rebuild OUT's report from its records (any machine)",
    )
    a = p.parse_args(argv)
    return HarnessConfig(
        kernelbench_dir=a.kernelbench_dir,
        out=a.out,
        levels=a.levels,
        problems=tuple(x.strip() for x in a.problems.split(",")) if a.problems else None,
        limit=a.limit,
        agent=a.agent,
        model=a.model,
        base_url=a.base_url,
        api_key_env=a.api_key_env,
        tool_mode=a.tool_mode,
        temperature=a.temperature,
        max_tokens=a.max_tokens,
        request_timeout_s=a.request_timeout_s,
        max_retries=a.max_retries,
        solutions_dir=a.solutions_dir,
        trajectories_dir=a.trajectories_dir,
        reference_as_solution=a.reference_as_solution,
        device=a.device,
        tolerance_mode=a.tolerance_mode,
        workers=a.workers,
        gpus=a.gpus,
        max_turns=a.max_turns,
        time_budget_s=a.time_budget_s,
        warmup_runs=a.warmup_runs,
        timed_runs=a.timed_runs,
        correctness_trials=a.correctness_trials,
        allow_vendor_libraries=a.allow_vendor_libraries,
        baselines=a.baselines,
        baselines_file=a.baselines_file,
        shipped_baselines=not a.no_shipped_baselines,
        cache_dir=a.cache_dir,
        run_timeout_s=a.run_timeout_s,
        fast_worker_start=a.fast_worker_start,
        seed=a.seed,
        max_wall_s=a.max_wall_s,
        plots=not a.no_plots,
        report_only=a.report_only,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the harness; print where the report went and the overall line."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = parse_args(argv)
        report = run(cfg)
    except CudaGymError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    m = report["metrics"]["overall"]
    if not report["complete"]:
        left = report["counts"]["problems"] - report["counts"]["done"] - report["counts"]["missing"]
        print(f"incomplete: {left} problems not run or failed; run the same command to resume")
    print(
        f"{report['solver']}: {m['n']} problems, pass {100 * m['pass_rate']:.1f}%, "
        f"faster than eager {100 * m['faster_than_eager_rate']:.1f}%, faster than compile "
        f"{100 * m['faster_than_compile_rate']:.1f}%; report: {cfg.out / 'report.md'}"
    )
    return 0 if report["complete"] else 3


if __name__ == "__main__":
    sys.exit(main())
