"""The training stages: what each writes and runs, and running them (or printing, --dry-run).

warmup          single-turn PPO on CudaKernelSingleTurn-v0
collect         sample agent trajectories with a policy -> JSONL
rft             filter trajectories -> SFT set -> OpenRLHF SFT of the actor
value-pretrain  PPO with the actor frozen: the critic learns values first
ppo             agentic multi-turn PPO with the published hyper-parameters
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent_trainer.agent_func import write_agent_func
from agent_trainer.collect import run_collect
from agent_trainer.config import AgentConfig
from agent_trainer.dataset import dataset_rows, source_from_spec, write_dataset
from agent_trainer.launch import (
    PPO_MODULE,
    SFT_MODULE,
    Command,
    agent_trainer_command,
    openrlhf_command,
    ppo_args,
    sft_args,
)
from agent_trainer.layout import actor_for, max_len_for, stage_dir, trajectories_path
from agent_trainer.pipeline_config import STAGES, PipelineConfig
from agent_trainer.rft import build_sft_set

logger = logging.getLogger(__name__)

SINGLE_TURN_ENV_ID = "cuda_gym:CudaKernelSingleTurn-v0"


@dataclass
class StagePlan:
    """What one stage writes before it runs, and its commands in order."""

    stage: str
    writes: list[Path] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)




def agent_for(cfg: PipelineConfig, stage: str) -> AgentConfig:
    """The agent configuration a PPO-family stage binds into its agent_func.py."""
    agent = cfg.agent
    if cfg.launch.evaluator_gpus_per_node > 0:
        agent = dataclasses.replace(agent, evaluator="ray")
    agent = dataclasses.replace(agent, trajectory_dir=str(stage_dir(cfg, stage) / "episodes"))
    if stage == "warmup":
        agent = dataclasses.replace(
            agent,
            env_id=SINGLE_TURN_ENV_ID,
            runner=dataclasses.replace(agent.runner, max_turns=1, judge_on_budget=True),
        )
    return agent




def plan_stage(cfg: PipelineConfig, stage: str, config_path: Path) -> StagePlan:
    """The files and commands of `stage`; pure (nothing is written)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; stages are {list(STAGES)}")
    out = stage_dir(cfg, stage)
    launch = cfg.launch
    if stage in ("warmup", "value-pretrain", "ppo"):
        ppo = {"warmup": cfg.warmup, "value-pretrain": cfg.value_pretrain, "ppo": cfg.ppo}[stage]
        actor = actor_for(cfg, stage)
        critic = actor
        if stage == "ppo" and "value-pretrain" in cfg.stages:
            critic = str(stage_dir(cfg, "value-pretrain") / "model_critic")
        args = ppo_args(cfg, ppo, actor=actor, critic=critic, agent_func=out / "agent_func.py",
                        dataset=out / "tasks.jsonl", out_dir=out,
                        max_len=max_len_for(cfg, stage))
        return StagePlan(stage, [out / "agent_config.json", out / "agent_func.py",
                                 out / "tasks.jsonl"],
                         [openrlhf_command(stage, launch, PPO_MODULE, args)])
    if stage == "collect":
        return StagePlan(stage, [trajectories_path(cfg)],
                         [agent_trainer_command(stage, launch, config_path)])
    args = sft_args(cfg.rft, base_model=actor_for(cfg, "rft"), dataset=out / "sft.jsonl",
                    out_dir=out, max_len=max_len_for(cfg, "rft"))
    return StagePlan(stage, [out / "sft.jsonl"], [
        agent_trainer_command(stage, launch, config_path, "--build-only"),
        openrlhf_command(stage, launch, SFT_MODULE, args),
    ])


def prepare_ppo_stage(cfg: PipelineConfig, stage: str) -> None:
    """Write a PPO-family stage's agent_config.json, agent_func.py and tasks.jsonl."""
    out = stage_dir(cfg, stage)
    write_agent_func(out, agent_for(cfg, stage))
    sources = [source_from_spec(s) for s in cfg.tasks.sources]
    rows = dataset_rows(sources, repeat=cfg.tasks.repeat, seed=cfg.tasks.seed,
                        include=list(cfg.tasks.include) if cfg.tasks.include else None)
    write_dataset(rows, out / "tasks.jsonl")


def run_stage(cfg: PipelineConfig, stage: str, config_path: Path, *, dry_run: bool = False,
              echo: Callable[[str], None] = print) -> int:
    """Run (or with `dry_run` print) one stage; returns the exit status."""
    plan = plan_stage(cfg, stage, config_path)
    echo(f"# stage {stage}: writes {', '.join(str(p) for p in plan.writes)}")
    if dry_run:
        for command in plan.commands:
            echo(command.shell())
        return 0
    if stage in ("warmup", "value-pretrain", "ppo"):
        prepare_ppo_stage(cfg, stage)
    for command in plan.commands:
        echo(command.shell())
        if command.openrlhf_module is None:
            code = _run_in_process(cfg, stage, command)
        else:
            code = subprocess.run(list(command.argv), check=False).returncode
        if code != 0:
            logger.error("stage %s failed (exit %d): %s", stage, code, command.shell())
            return code
    return 0


def _run_in_process(cfg: PipelineConfig, stage: str, command: Command) -> int:
    if stage == "collect":
        run_collect(cfg)
        return 0
    build_sft_set(cfg)
    return 0


def run_pipeline(cfg: PipelineConfig, config_path: Path, *, dry_run: bool = False,
                 echo: Callable[[str], None] = print) -> int:
    """Run every stage of `cfg.stages` in order; stop at the first failure."""
    for stage in cfg.stages:
        code = run_stage(cfg, stage, config_path, dry_run=dry_run, echo=echo)
        if code:
            return code
    return 0
