"""OpenRLHF command lines for the launch recipes, built as data so that tests can parse them.

Recipes (LaunchConfig.recipe):
- one_gpu: actor, critic, (ref) and one vLLM engine colocated on one GPU with sleep mode; the
  env judges on the same GPU (timings share it with training; keep vLLM memory <= 0.5).
- node: one node; `evaluator_gpus_per_node` GPUs stay outside OpenRLHF's placement group and
  envs run as Ray actors on them (the separate evaluator pool).
- multi_node: the same per node on a Ray cluster; commands go through `ray job submit`.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from agent_trainer.multiturn_gae import SETUP_HOOK
from agent_trainer.pipeline_config import LaunchConfig, PipelineConfig, PPOConfig, RFTConfig

PPO_MODULE = "openrlhf.cli.train_ppo_ray"
OPENRLHF_ENTRY = "agent_trainer.openrlhf_main"
"""Runs an OpenRLHF module with our patches: multi-turn GAE in every Ray worker for PPO
(multiturn_gae.py), the token-row dataset for SFT (token_sft.py)."""
SFT_MODULE = "openrlhf.cli.train_sft"
WANDB_KEY = "$WANDB_API_KEY"
"""Stands for the W&B key in printed commands; `Command.runnable_argv` puts the key in."""
FREEZE_ALL_STEPS = 1_000_000_000
"""`--critic.freezing_steps` value that keeps the actor frozen for a whole run."""


@dataclass(frozen=True)
class Command:
    """One process to run.

    Attributes:
        stage: The stage it belongs to.
        argv: The full command line.
        openrlhf_module: The OpenRLHF CLI module it runs, if any.
        openrlhf_args: The flags passed to that module (what its parser sees).
    """

    stage: str
    argv: tuple[str, ...]
    openrlhf_module: str | None = None
    openrlhf_args: tuple[str, ...] = ()

    def shell(self) -> str:
        """The command as one shell-quoted line (secrets shown as their variable)."""
        return shlex.join(self.argv)

    def runnable_argv(self) -> list[str]:
        """`argv` with the W&B key read from $WANDB_API_KEY.

        Raises:
            ValueError: The command logs to W&B and $WANDB_API_KEY is not set.
        """
        if WANDB_KEY not in self.argv:
            return list(self.argv)
        key = os.environ.get("WANDB_API_KEY")
        if not key:
            raise ValueError("logging.wandb_project is set: export WANDB_API_KEY first")
        return [key if a == WANDB_KEY else a for a in self.argv]


def _num(value: float) -> str:
    return f"{value:g}"


def placement_flags(launch: LaunchConfig, ppo: PPOConfig) -> list[str]:
    """GPU placement: every model colocated on the training GPUs, vLLM with sleep mode."""
    nodes, gpus = str(launch.num_nodes), str(launch.train_gpus_per_node)
    engines = launch.num_nodes * launch.train_gpus_per_node // launch.tensor_parallel_size
    flags = ["--actor.num_nodes", nodes, "--actor.num_gpus_per_node", gpus]
    if ppo.estimator == "gae":
        flags += ["--critic.num_nodes", nodes, "--critic.num_gpus_per_node", gpus]
    if ppo.kl_coef > 0:
        flags += ["--ref.num_nodes", nodes, "--ref.num_gpus_per_node", gpus]
    flags += [
        "--vllm.num_engines", str(engines),
        "--vllm.tensor_parallel_size", str(launch.tensor_parallel_size),
        "--vllm.gpu_memory_utilization", _num(launch.gpu_memory_utilization),
        "--train.colocate_all", "--vllm.enable_sleep", "--ds.enable_sleep",
    ]
    return flags


def long_context_flags(stage: PPOConfig | RFTConfig) -> list[str]:
    """Ring attention and sample packing (OpenRLHF's default attention, flash_attention_2)."""
    flags = []
    if stage.packing_samples:
        flags += ["--ds.packing_samples"]
    if stage.ring_attn_size > 1:
        flags += ["--ds.ring_attn_size", str(stage.ring_attn_size)]
    return flags


def ppo_args(cfg: PipelineConfig, ppo: PPOConfig, *, actor: str, critic: str | None,
             agent_func: Path, dataset: Path, out_dir: Path, max_len: int,
             eval_dataset: Path | None = None) -> list[str]:
    """train_ppo_ray flags of one PPO-family stage (resuming from its checkpoint if any)."""
    low, high = cfg.agent.reward_clip
    args = [
        "--actor.model_name_or_path", actor,
        "--train.agent_func_path", str(agent_func),
        "--data.prompt_dataset", str(dataset),
        "--data.input_key", "prompt",
        "--data.label_key", "label",
        "--data.max_len", str(max_len),
        "--rollout.batch_size", str(ppo.rollout_batch_size),
        "--rollout.n_samples_per_prompt", str(ppo.n_samples_per_prompt),
        "--rollout.micro_batch_size", str(ppo.micro_batch_size),
        "--rollout.temperature", _num(ppo.temperature),
        "--train.batch_size", str(ppo.train_batch_size),
        "--train.micro_batch_size", str(ppo.micro_batch_size),
        "--train.num_episodes", str(ppo.num_episodes),
        "--train.max_epochs", str(ppo.max_epochs),
        "--algo.advantage.estimator", ppo.estimator,
        "--algo.advantage.gamma", _num(ppo.gamma),
        "--algo.advantage.lambd", _num(ppo.lambd),
        "--actor.eps_clip_low_high", _num(ppo.eps_clip_low), _num(ppo.eps_clip_high),
        "--actor.adam.lr", _num(ppo.actor_lr),
        "--algo.kl.init_coef", _num(ppo.kl_coef),
        "--reward.clip_range", _num(low), _num(high),
        "--ds.zero_stage", str(ppo.zero_stage),
        "--ds.param_dtype", "bf16",
        "--actor.gradient_checkpointing_enable",
        "--ckpt.output_dir", str(out_dir / "model"),
        "--ckpt.path", str(out_dir / "ckpt"),
        "--ckpt.save_steps", str(ppo.save_steps),
        "--ckpt.load_enable",
    ]
    if eval_dataset is not None:
        args += ["--eval.dataset", str(eval_dataset), "--eval.steps", str(ppo.eval_steps)]
    if ppo.estimator == "gae":
        args += ["--critic.model_name_or_path", critic or actor,
                 "--critic.adam.lr", _num(ppo.critic_lr)]
    if ppo.critic_only:
        args += ["--critic.freezing_steps", str(FREEZE_ALL_STEPS), "--critic.save_value_network"]
    elif ppo.estimator == "gae":
        args += ["--critic.save_value_network"]
    return args + placement_flags(cfg.launch, ppo) + long_context_flags(ppo) + list(ppo.extra_args)


def sft_args(rft: RFTConfig, *, base_model: str, dataset: Path, out_dir: Path,
             max_len: int) -> list[str]:
    """train_sft flags over token rows (token_sft.py: loss on the action spans only)."""
    return [
        "--model.model_name_or_path", base_model,
        "--data.dataset", str(dataset),
        "--data.input_key", "input_ids",
        "--data.max_len", str(max_len),
        "--train.batch_size", str(rft.train_batch_size),
        "--train.micro_batch_size", str(rft.micro_batch_size),
        "--train.max_epochs", str(rft.epochs),
        "--adam.lr", _num(rft.lr),
        "--ds.zero_stage", str(rft.zero_stage),
        "--ds.param_dtype", "bf16",
        "--model.gradient_checkpointing_enable",
        "--ckpt.output_dir", str(out_dir / "model"),
        "--ckpt.path", str(out_dir / "ckpt"),
        "--ckpt.save_steps", str(rft.save_steps),
        "--ckpt.load_enable",
        *long_context_flags(rft),
        *rft.extra_args,
    ]


def logging_args(cfg: PipelineConfig, stage: str, out_dir: Path) -> list[str]:
    """W&B (key from $WANDB_API_KEY at run time) and TensorBoard flags of a stage."""
    log = cfg.logging
    args = []
    if log.wandb_project:
        args += ["--logger.wandb.key", WANDB_KEY, "--logger.wandb.project", log.wandb_project,
                 "--logger.wandb.run_name", f"{cfg.run_path.name}-{stage}"]
        if log.wandb_group:
            args += ["--logger.wandb.group", log.wandb_group]
    if log.tensorboard:
        args += ["--logger.tensorboard_dir", str(out_dir / "tensorboard")]
    return args + ["--logger.logging_steps", str(log.logging_steps)]


def openrlhf_command(stage: str, launch: LaunchConfig, module: str, args: list[str]) -> Command:
    """The full command for an OpenRLHF module under the launch recipe."""
    if module == SFT_MODULE:
        inner = [launch.python_executable, "-m", "deepspeed.launcher.runner", "--num_gpus",
                 str(launch.sft_gpus), "--module", OPENRLHF_ENTRY, module]
    else:
        inner = [launch.python_executable, "-m", OPENRLHF_ENTRY, module]
    argv = inner + list(args)
    if launch.recipe == "multi_node":
        runtime = json.dumps({"working_dir": launch.working_dir,
                              "worker_process_setup_hook": SETUP_HOOK})
        argv = ["ray", "job", "submit", "--address", launch.ray_address,
                "--runtime-env-json", runtime, "--"] + argv
    return Command(stage, tuple(argv), module, tuple(args))


def agent_trainer_command(stage: str, launch: LaunchConfig, config_path: Path,
                          *extra: str) -> Command:
    """A `python -m agent_trainer` step (run on the machine that launches the pipeline)."""
    return Command(stage, (launch.python_executable, "-m", "agent_trainer", stage, "--config",
                           str(config_path), *extra))
