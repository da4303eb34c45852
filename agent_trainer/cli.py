"""The agent-trainer command: training stages, the pipeline, and helpers.

agent-trainer pipeline --config agent_trainer/recipes/one_gpu.yaml --dry-run
agent-trainer collect --config CFG --episodes 8 --model /models/tiny
agent-trainer rft --config CFG --build-only
agent-trainer dataset --source builtin --out tasks.jsonl
agent-trainer prepare --config CFG --stage ppo        # agent_func.py + tasks.jsonl only
agent-trainer tiny-model --out /tmp/tiny-lm
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path

from agent_trainer.pipeline_config import PPO_STAGES, STAGES, PipelineConfig, load_config
from agent_trainer.stages import (
    plan_stage,
    prepare_ppo_stage,
    run_pipeline,
    run_stage,
    validate,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="agent-trainer", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for stage in (*STAGES, "pipeline"):
        p = sub.add_parser(stage, help=f"run the {stage} stage" if stage != "pipeline"
                           else "run every stage of the config in order")
        p.add_argument("--config", required=True, help="pipeline YAML file")
        p.add_argument("--dry-run", action="store_true",
                       help="validate the config, tasks and context; print the commands; "
                       "write and run nothing")
        p.add_argument("--force", action="store_true",
                       help="run stages that finished before with the same commands")
        if stage == "collect":
            p.add_argument("--episodes", type=int, help="override collect.episodes")
            p.add_argument("--model", help="override collect.model (a local HF model)")
            p.add_argument("--policy", choices=["hf", "openai"], help="override collect.policy")
            p.add_argument("--endpoint", help="override collect.endpoint")
            p.add_argument("--out", help="override collect.out (JSONL)")
        if stage == "rft":
            p.add_argument("--build-only", action="store_true",
                           help="write the SFT set; do not launch SFT")
    p = sub.add_parser("prepare", help="write a PPO stage's agent_func.py, config and tasks")
    p.add_argument("--config", required=True)
    p.add_argument("--stage", required=True, choices=["warmup", "value-pretrain", "ppo"])
    p = sub.add_parser("dataset", help="write a prompt dataset (JSONL) from task sources")
    p.add_argument("--source", action="append", default=None,
                   help="builtin, synth[:SPLIT], dir:PATH, parquet:PATH, "
                   "kernelbench:PATH:LEVEL or ops6k:PATH (repeatable; default builtin)")
    p.add_argument("--out", required=True)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("tiny-model", help="write a tiny random HF causal LM + tokenizer")
    p.add_argument("--out", required=True)
    return parser


def _with_overrides(cfg: PipelineConfig, args: argparse.Namespace) -> PipelineConfig:
    if args.command != "collect":
        return cfg
    changes = {k: getattr(args, k) for k in ("episodes", "model", "policy", "endpoint", "out")
               if getattr(args, k) is not None}
    return dataclasses.replace(cfg, collect=dataclasses.replace(cfg.collect, **changes))


def main(argv: list[str] | None = None) -> int:
    """Entry point of `agent-trainer` and `python -m agent_trainer`."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "tiny-model":
            from agent_trainer.tiny import save_tiny_model

            print(save_tiny_model(args.out))
            return 0
        if args.command == "dataset":
            from agent_trainer.dataset import dataset_rows, source_from_spec, write_dataset

            sources = [source_from_spec(s) for s in (args.source or ["builtin"])]
            rows = dataset_rows(sources, repeat=args.repeat, seed=args.seed)
            print(write_dataset(rows, args.out), f"({len(rows)} rows)")
            return 0
        config_path = Path(args.config).resolve()
        cfg = _with_overrides(load_config(config_path), args)
        if args.command == "prepare":
            prepare_ppo_stage(cfg, args.stage)
            print(plan_stage(cfg, args.stage, config_path).writes)
            return 0
        if args.command == "pipeline":
            return run_pipeline(cfg, config_path, dry_run=args.dry_run, force=args.force)
        if args.command == "rft" and args.build_only:
            from agent_trainer.rft import build_sft_set

            if not args.dry_run:
                print(build_sft_set(cfg).summary())
            return 0
        if args.command == "collect" and not args.dry_run:
            from agent_trainer.collect import run_collect

            print(run_collect(cfg))
            return 0
        splits = validate(cfg) if args.command in PPO_STAGES else None
        return run_stage(cfg, args.command, config_path, dry_run=args.dry_run, force=args.force,
                         splits=splits)
    except (ValueError, FileNotFoundError) as exc:
        print(f"agent-trainer: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
