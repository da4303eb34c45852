"""Where a pipeline run keeps its files, and which model each stage starts from."""

from __future__ import annotations

from pathlib import Path

from agent_trainer.pipeline_config import PipelineConfig


def stage_dir(cfg: PipelineConfig, stage: str) -> Path:
    """Directory of a stage's files."""
    return cfg.run_path / stage


def base_model_dir(cfg: PipelineConfig) -> Path:
    """The rope-scaled copy of the model a run starts from, when `rope_scaling` is set."""
    return cfg.run_path / "base_model"


def starting_model(cfg: PipelineConfig) -> str:
    """The model the first stage starts from: `model`, or its rope-scaled copy."""
    return str(base_model_dir(cfg)) if cfg.rope_scaling else cfg.model


def actor_for(cfg: PipelineConfig, stage: str) -> str:
    """The actor a stage starts from: the output of the last earlier actor-training stage."""
    actor = starting_model(cfg)
    for earlier in cfg.stages[: cfg.stages.index(stage)] if stage in cfg.stages else ():
        if earlier in ("warmup", "rft"):
            actor = str(stage_dir(cfg, earlier) / "model")
    return actor


def max_len_for(cfg: PipelineConfig, stage: str) -> int:
    """`--data.max_len` of a stage: its own setting, else the agent runner's budget."""
    own = {"warmup": cfg.warmup, "value-pretrain": cfg.value_pretrain, "ppo": cfg.ppo,
           "rft": cfg.rft}[stage].max_len
    return own or cfg.agent.runner.max_length


def trajectories_path(cfg: PipelineConfig) -> Path:
    """Where `collect` writes its JSONL."""
    return Path(cfg.collect.out).resolve() if cfg.collect.out else (
        stage_dir(cfg, "collect") / "trajectories.jsonl")
