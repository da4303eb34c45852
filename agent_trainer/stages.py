"""The training stages: what each writes and runs, and running them (or printing, --dry-run).

warmup          single-turn PPO on CudaKernelSingleTurn-v0
collect         sample agent trajectories with a policy -> JSONL
rft             filter trajectories -> SFT set -> OpenRLHF SFT of the actor
value-pretrain  PPO with the actor frozen: the critic learns values first
ppo             agentic multi-turn PPO with the published hyper-parameters
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from agent_trainer.agent_func import write_agent_func
from agent_trainer.collect import run_collect
from agent_trainer.config import AgentConfig
from agent_trainer.context import check_context, prepare_base_model
from agent_trainer.dataset import TaskSplits, rows_from_entries, task_splits, write_dataset
from agent_trainer.launch import (
    PPO_MODULE,
    SFT_MODULE,
    Command,
    agent_trainer_command,
    logging_args,
    openrlhf_command,
    ppo_args,
    sft_args,
)
from agent_trainer.layout import actor_for, max_len_for, stage_dir, trajectories_path
from agent_trainer.pipeline_config import PPO_STAGES, STAGES, PipelineConfig, PPOConfig
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
    """The files and commands of `stage`; pure (nothing is written or loaded)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; stages are {list(STAGES)}")
    out = stage_dir(cfg, stage)
    launch = cfg.launch
    if stage in PPO_STAGES:
        ppo = ppo_config(cfg, stage)
        actor = actor_for(cfg, stage)
        critic = actor
        if stage == "ppo" and "value-pretrain" in cfg.stages:
            critic = str(stage_dir(cfg, "value-pretrain") / "model_critic")
        validation = out / "validation.jsonl" if has_validation(cfg) else None
        args = ppo_args(cfg, ppo, actor=actor, critic=critic, agent_func=out / "agent_func.py",
                        dataset=out / "tasks.jsonl", out_dir=out,
                        max_len=max_len_for(cfg, stage), eval_dataset=validation)
        args += logging_args(cfg, stage, out)
        writes = [out / "agent_config.json", out / "agent_func.py", out / "tasks.jsonl"]
        return StagePlan(stage, writes + ([validation] if validation else []),
                         [openrlhf_command(stage, launch, PPO_MODULE, args)])
    if stage == "collect":
        return StagePlan(stage, [trajectories_path(cfg)],
                         [agent_trainer_command(stage, launch, config_path)])
    args = sft_args(cfg.rft, base_model=actor_for(cfg, "rft"), dataset=out / "sft.jsonl",
                    out_dir=out, max_len=max_len_for(cfg, "rft"))
    args += logging_args(cfg, stage, out)
    return StagePlan(stage, [out / "sft.jsonl"], [
        agent_trainer_command(stage, launch, config_path, "--build-only"),
        openrlhf_command(stage, launch, SFT_MODULE, args),
    ])


def ppo_config(cfg: PipelineConfig, stage: str) -> PPOConfig:
    """The PPOConfig of a PPO-family stage."""
    return {"warmup": cfg.warmup, "value-pretrain": cfg.value_pretrain, "ppo": cfg.ppo}[stage]


def has_validation(cfg: PipelineConfig) -> bool:
    """Whether the config asks for validation tasks (OpenRLHF's periodic evaluation)."""
    return bool(cfg.tasks.validation_sources) or cfg.tasks.validation_fraction > 0


def load_tasks(cfg: PipelineConfig) -> TaskSplits:
    """The run's training, validation and evaluation tasks (loaded and checked)."""
    t = cfg.tasks
    splits = task_splits(list(t.sources), list(t.validation_sources), t.validation_fraction,
                         list(t.eval_sources), list(t.include) if t.include else None, t.seed)
    if has_validation(cfg) and not splits.validation:
        raise ValueError("tasks: validation is configured but no validation task was found")
    return splits


def stage_rows(cfg: PipelineConfig, stage: str, splits: TaskSplits) -> list[dict]:
    """A PPO-family stage's training rows (each task `task_repeat` or `tasks.repeat` times)."""
    repeat = ppo_config(cfg, stage).task_repeat or cfg.tasks.repeat
    return rows_from_entries(splits.train, repeat, cfg.tasks.seed)


def ppo_steps(cfg: PipelineConfig, stage: str, rows: int) -> int:
    """OpenRLHF's optimizer steps for `rows` prompts (train_ppo_ray's max_steps)."""
    ppo = ppo_config(cfg, stage)
    return (rows * ppo.n_samples_per_prompt // ppo.train_batch_size * ppo.num_episodes
            * ppo.max_epochs)


def check_stage_data(cfg: PipelineConfig, splits: TaskSplits,
                     echo: Callable[[str], None] = print) -> None:
    """Print each PPO stage's data size and step count; refuse a stage with no full step.

    Raises:
        ValueError: A stage's dataset is smaller than one rollout batch.
    """
    echo(f"# tasks: {splits.summary()}")
    for stage in cfg.stages:
        if stage not in PPO_STAGES:
            continue
        ppo = ppo_config(cfg, stage)
        rows = len(stage_rows(cfg, stage, splits))
        if rows < ppo.rollout_batch_size:
            raise ValueError(f"stage {stage}: {rows} prompts are fewer than one rollout batch "
                             f"({ppo.rollout_batch_size}); raise task_repeat or add tasks")
        echo(f"# stage {stage}: {rows} prompts, {rows // ppo.rollout_batch_size} rollout steps, "
             f"{ppo_steps(cfg, stage, rows)} optimizer steps")


def prepare_ppo_stage(cfg: PipelineConfig, stage: str, splits: TaskSplits | None = None) -> None:
    """Write a PPO-family stage's agent_config.json, agent_func.py and its datasets."""
    splits = splits or load_tasks(cfg)
    out = stage_dir(cfg, stage)
    write_agent_func(out, agent_for(cfg, stage))
    write_dataset(stage_rows(cfg, stage, splits), out / "tasks.jsonl")
    if has_validation(cfg):
        write_dataset(rows_from_entries(splits.validation, 1, cfg.tasks.seed),
                      out / "validation.jsonl")


def write_evaluation_set(cfg: PipelineConfig, splits: TaskSplits) -> Path | None:
    """Write the held-out evaluation set to <run_dir>/evaluation.jsonl, if there is one."""
    if not splits.evaluation:
        return None
    return write_dataset(rows_from_entries(splits.evaluation, 1, cfg.tasks.seed),
                         cfg.run_path / "evaluation.jsonl")


def plan_digest(plan: StagePlan) -> str:
    """Hash of a stage's commands: a finished stage is skipped only if they are unchanged."""
    text = "\n".join(c.shell() for c in plan.commands)
    return hashlib.sha256(text.encode()).hexdigest()


def done_marker(cfg: PipelineConfig, stage: str) -> Path:
    """The file a stage writes when it finished (exit status 0)."""
    return stage_dir(cfg, stage) / "stage_done.json"


def finished(cfg: PipelineConfig, plan: StagePlan) -> bool:
    """Whether the stage finished before with the same commands."""
    marker = done_marker(cfg, plan.stage)
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("commands_sha256") == plan_digest(plan)
    except ValueError:
        return False


def run_stage(cfg: PipelineConfig, stage: str, config_path: Path, *, dry_run: bool = False,
              force: bool = False, splits: TaskSplits | None = None,
              echo: Callable[[str], None] = print) -> int:
    """Run (or with `dry_run` print) one stage; returns the exit status.

    A stage that finished before with the same commands is skipped unless `force`; an
    interrupted one resumes from its last checkpoint (`--ckpt.load_enable`).
    """
    plan = plan_stage(cfg, stage, config_path)
    if not force and finished(cfg, plan):
        echo(f"# stage {stage}: finished before ({done_marker(cfg, stage)}); skipped "
             "(--force runs it again)")
        return 0
    echo(f"# stage {stage}: writes {', '.join(str(p) for p in plan.writes)}")
    if dry_run:
        for command in plan.commands:
            echo(command.shell())
        return 0
    if stage in PPO_STAGES:
        prepare_ppo_stage(cfg, stage, splits)
    for command in plan.commands:
        echo(command.shell())
        if command.openrlhf_module is None:
            code = _run_in_process(cfg, stage)
        else:
            code = subprocess.run(command.runnable_argv(), check=False).returncode
        if code != 0:
            logger.error("stage %s failed (exit %d): %s", stage, code, command.shell())
            return code
    done_marker(cfg, stage).parent.mkdir(parents=True, exist_ok=True)
    done_marker(cfg, stage).write_text(json.dumps(
        {"stage": stage, "commands_sha256": plan_digest(plan),
         "finished": datetime.now(timezone.utc).isoformat()}, indent=2))
    return 0


def _run_in_process(cfg: PipelineConfig, stage: str) -> int:
    if stage == "collect":
        run_collect(cfg)
        return 0
    build_sft_set(cfg)
    return 0


def validate(cfg: PipelineConfig, echo: Callable[[str], None] = print) -> TaskSplits:
    """Everything checked before a run: tasks and step counts, the model's context length.

    Raises:
        ValueError: The first problem found, naming the setting to change.
    """
    splits = load_tasks(cfg)
    check_stage_data(cfg, splits, echo)
    check_context(cfg, echo)
    return splits


def run_pipeline(cfg: PipelineConfig, config_path: Path, *, dry_run: bool = False,
                 force: bool = False, echo: Callable[[str], None] = print) -> int:
    """Validate, then run every stage of `cfg.stages` in order; stop at the first failure."""
    splits = validate(cfg, echo)
    if not dry_run:
        if cfg.rope_scaling:
            echo(f"# rope-scaled base model: {prepare_base_model(cfg)}")
            check_context(cfg, echo)
        path = write_evaluation_set(cfg, splits)
        if path:
            echo(f"# held-out evaluation set: {path}")
    for stage in cfg.stages:
        code = run_stage(cfg, stage, config_path, dry_run=dry_run, force=force, splits=splits,
                         echo=echo)
        if code:
            return code
    return 0
