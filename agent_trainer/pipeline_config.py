"""PipelineConfig: one YAML file describing a whole training run and each of its stages."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from agent_trainer.batches import check_rollout_batch, check_train_batch
from agent_trainer.config import AgentConfig, from_dict
from agent_trainer.dataset import source_from_spec

STAGES = ("warmup", "collect", "rft", "value-pretrain", "ppo")
PPO_STAGES = ("warmup", "value-pretrain", "ppo")
RECIPES = ("one_gpu", "node", "multi_node")


@dataclass(frozen=True)
class LaunchConfig:
    """Where the training processes run (the launch recipe).

    Attributes:
        recipe: "one_gpu" (everything colocated on one GPU, envs judged on it too), "node"
            (one node; `evaluator_gpus_per_node` GPUs form a separate evaluator pool) or
            "multi_node" (several nodes of a Ray cluster, jobs sent with `ray job submit`).
        num_nodes: Nodes used for training.
        gpus_per_node: GPUs per node, evaluator GPUs included.
        evaluator_gpus_per_node: GPUs per node kept out of training for env judging.
        tensor_parallel_size: vLLM tensor parallelism.
        gpu_memory_utilization: vLLM's share of a colocated GPU (keep <= 0.5 on one GPU).
        ray_address: Ray dashboard address for `ray job submit` (multi_node).
        working_dir: Ray job working directory (multi_node).
        python: Python executable in the commands; None: the one running agent_trainer
            (`sys.executable`), so the stages run in the same environment.
    """

    recipe: str = "one_gpu"
    num_nodes: int = 1
    gpus_per_node: int = 1
    evaluator_gpus_per_node: int = 0
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.4
    ray_address: str = "http://127.0.0.1:8265"
    working_dir: str = "."
    python: str | None = None

    def __post_init__(self) -> None:
        if self.recipe not in RECIPES:
            raise ValueError(f"launch.recipe must be one of {RECIPES}, got {self.recipe!r}")
        if self.recipe == "one_gpu" and (self.num_nodes, self.gpus_per_node,
                                         self.evaluator_gpus_per_node) != (1, 1, 0):
            raise ValueError("recipe one_gpu needs num_nodes=1, gpus_per_node=1, "
                             "evaluator_gpus_per_node=0; use recipe 'node' for more GPUs")
        if self.recipe == "node" and self.num_nodes != 1:
            raise ValueError("recipe node runs on one node; use 'multi_node' for more")
        if self.train_gpus_per_node < 1:
            raise ValueError("gpus_per_node must exceed evaluator_gpus_per_node")
        if self.train_gpus_per_node % self.tensor_parallel_size:
            raise ValueError("training GPUs per node must be a multiple of tensor_parallel_size")

    @property
    def python_executable(self) -> str:
        """`python`, or the running interpreter when it is not set."""
        return self.python or sys.executable

    @property
    def train_gpus_per_node(self) -> int:
        """GPUs per node given to OpenRLHF's PPO (the evaluator GPUs excluded)."""
        return self.gpus_per_node - self.evaluator_gpus_per_node

    @property
    def sft_gpus(self) -> int:
        """GPUs of the SFT run: every GPU of the launching node (no env runs during SFT)."""
        return self.gpus_per_node


@dataclass(frozen=True)
class TasksConfig:
    """Which tasks the prompt datasets hold (source specs: see agent_trainer.dataset).

    Attributes:
        sources: Training task sources: "builtin", "synth[:train|:validation]", "dir:PATH",
            "parquet:PATH", "kernelbench:PATH:LEVEL", "ops6k:PATH".
        validation_sources: Tasks OpenRLHF evaluates every `eval_steps` during training.
        validation_fraction: Share of the training sources' tasks (those without a split of
            their own) held out for validation by a stable hash.
        eval_sources: The held-out evaluation set (e.g. KernelBench levels), written to
            <run_dir>/evaluation.jsonl and checked never to be trained on.
        include: Only these training task ids (None = all).
        repeat: Times each training task appears in a stage's dataset (a PPO stage's
            `task_repeat` overrides it).
        seed: Shuffle, split and label seed.
    """

    sources: tuple[str, ...] = ("synth:train",)
    validation_sources: tuple[str, ...] = ("synth:validation",)
    validation_fraction: float = 0.0
    eval_sources: tuple[str, ...] = ()
    include: tuple[str, ...] | None = None
    repeat: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("tasks.sources must name at least one task source")
        if not 0 <= self.validation_fraction < 1:
            raise ValueError("tasks.validation_fraction must be in [0, 1)")
        if self.repeat < 1:
            raise ValueError("tasks.repeat must be at least 1")
        for spec in (*self.sources, *self.validation_sources, *self.eval_sources):
            source_from_spec(spec)  # raises on a bad spec or a missing path


@dataclass(frozen=True)
class PPOConfig:
    """An OpenRLHF train_ppo_ray run (warm-up, value pretraining or agentic PPO).

    Defaults are the published agentic-PPO settings: GAE gamma 1, lambda 0.95, clip 0.2 low /
    0.28 high, actor LR 3e-6, critic LR 6e-6.

    Attributes:
        estimator: `--algo.advantage.estimator` ("gae" builds a critic).
        gamma: GAE discount.
        lambd: GAE lambda.
        eps_clip_low: PPO clip below 1.
        eps_clip_high: PPO clip above 1.
        actor_lr: Actor learning rate (0 is not allowed; freeze with `critic_only`).
        critic_lr: Critic learning rate.
        kl_coef: KL penalty; 0 builds no reference model.
        rollout_batch_size: Prompts per rollout step.
        n_samples_per_prompt: Episodes per prompt.
        train_batch_size: Samples per optimizer step (batch 1024 = one update per step).
        micro_batch_size: Per-GPU micro batch (training and rollout forward passes).
        num_episodes: Passes over the prompt dataset.
        task_repeat: Times each training task appears in this stage's dataset (None =
            tasks.repeat); with the rollout batch it sets the step count: rows / rollout batch.
        eval_steps: Evaluate on the validation tasks every N steps (when there are any).
        max_epochs: PPO epochs per rollout batch.
        temperature: Sampling temperature.
        max_len: Total token budget per episode (`--data.max_len`); None = agent runner's.
        critic_only: Freeze the actor for the whole run and save the critic (value
            pretraining: `--critic.freezing_steps` covers every step).
        zero_stage: DeepSpeed ZeRO stage.
        save_steps: Checkpoint every N steps (-1 = only at the end).
        ring_attn_size: GPUs that share one sequence with ring attention (long context);
            needs `packing_samples`.
        packing_samples: Pack samples into one row per micro batch (flash attention).
        extra_args: More train_ppo_ray flags, appended verbatim.
    """

    estimator: str = "gae"
    gamma: float = 1.0
    lambd: float = 0.95
    eps_clip_low: float = 0.2
    eps_clip_high: float = 0.28
    actor_lr: float = 3e-6
    critic_lr: float = 6e-6
    kl_coef: float = 0.0
    rollout_batch_size: int = 128
    n_samples_per_prompt: int = 8
    train_batch_size: int = 1024
    micro_batch_size: int = 1
    num_episodes: int = 1
    task_repeat: int | None = None
    eval_steps: int = 10
    max_epochs: int = 1
    temperature: float = 1.0
    max_len: int | None = None
    critic_only: bool = False
    zero_stage: int = 3
    save_steps: int = 10
    ring_attn_size: int = 1
    packing_samples: bool = False
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.critic_only and self.estimator != "gae":
            raise ValueError("critic_only (value pretraining) needs estimator 'gae'")
        _check_common(self)


@dataclass(frozen=True)
class CollectConfig:
    """Trajectory sampling with a policy.

    Attributes:
        episodes: Episodes to run.
        policy: "hf" (local Hugging Face model) or "openai" (OpenAI-compatible endpoint).
        model: Model path for "hf" (None = the latest actor of the pipeline).
        tokenizer: Tokenizer path (None = the model's).
        endpoint: Base URL for "openai", e.g. http://localhost:8000/v1.
        api_model: Model name sent to the endpoint.
        temperature: Sampling temperature.
        concurrency: Episodes in flight at once.
        device: Torch device for "hf" ("auto" = cuda when available).
        out: Output JSONL (None = <run_dir>/collect/trajectories.jsonl).
    """

    episodes: int = 64
    policy: str = "hf"
    model: str | None = None
    tokenizer: str | None = None
    endpoint: str | None = None
    api_model: str | None = None
    temperature: float = 1.0
    concurrency: int = 4
    device: str = "auto"
    out: str | None = None

    def __post_init__(self) -> None:
        if self.policy not in ("hf", "openai"):
            raise ValueError("collect.policy must be 'hf' or 'openai'")
        if self.policy == "openai" and not self.endpoint:
            raise ValueError("collect.policy 'openai' needs collect.endpoint")
        if self.episodes < 1 or self.concurrency < 1:
            raise ValueError("collect.episodes and collect.concurrency must be at least 1")


@dataclass(frozen=True)
class RFTConfig:
    """Rejection fine-tuning: filter trajectories, write the SFT set, fine-tune the actor.

    Attributes:
        min_reward: Keep trajectories whose reward is above this.
        max_repeats: Drop a trajectory when one action text occurs more than this many times
            (looping).
        drop_invalid: Drop trajectories with any malformed tool call.
        drop_truncated: Drop trajectories a budget ended.
        lr: SFT learning rate.
        epochs: SFT epochs.
        train_batch_size: SFT global batch.
        micro_batch_size: SFT per-GPU batch.
        max_len: SFT sequence length (None = agent runner's max_length).
        zero_stage: DeepSpeed ZeRO stage.
        save_steps: Checkpoint every N steps (-1 = only at the end).
        ring_attn_size: GPUs that share one sequence with ring attention; needs
            `packing_samples`.
        packing_samples: Pack samples into one row per micro batch (flash attention).
        extra_args: More train_sft flags, appended verbatim.
    """

    min_reward: float = 0.0
    max_repeats: int = 3
    drop_invalid: bool = True
    drop_truncated: bool = False
    lr: float = 1e-5
    epochs: int = 2
    train_batch_size: int = 64
    micro_batch_size: int = 1
    max_len: int | None = None
    zero_stage: int = 3
    save_steps: int = -1
    ring_attn_size: int = 1
    packing_samples: bool = False
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_common(self)


def _check_common(cfg: PPOConfig | RFTConfig) -> None:
    for name in ("train_batch_size", "micro_batch_size", "ring_attn_size"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name} must be at least 1")
    if cfg.ring_attn_size > 1 and not cfg.packing_samples:
        raise ValueError("ring_attn_size > 1 needs packing_samples: true (OpenRLHF's ring "
                         "attention works on packed samples)")
    if cfg.save_steps == 0 or cfg.save_steps < -1:
        raise ValueError("save_steps must be a positive step count, or -1 for the end only")


@dataclass(frozen=True)
class LoggingConfig:
    """Where the OpenRLHF stages log metrics.

    Attributes:
        wandb_project: Weights & Biases project (None = no W&B); the key is read from
            $WANDB_API_KEY when a stage starts, never written into a command line on disk.
        wandb_group: W&B group of the run's stages.
        tensorboard: Write TensorBoard logs to <stage dir>/tensorboard (OpenRLHF uses them
            when W&B is off).
        logging_steps: Log every N steps.
    """

    wandb_project: str | None = None
    wandb_group: str | None = None
    tensorboard: bool = True
    logging_steps: int = 1

    def __post_init__(self) -> None:
        if self.logging_steps < 1:
            raise ValueError("logging.logging_steps must be at least 1")


@dataclass(frozen=True)
class PipelineConfig:
    """A whole run: model, tasks, agent, launch recipe, and the stages with their settings.

    Attributes:
        run_dir: Directory for every stage's files (on storage all nodes see).
        model: The starting model (Hugging Face directory or hub id).
        stages: Stages `pipeline` runs, in order (a subset of warmup, collect, rft,
            value-pretrain, ppo).
        tasks: Prompt datasets.
        agent: The multi-turn agent (env, runner budgets); warm-up derives its single-turn one.
        launch: Launch recipe.
        warmup: Single-turn PPO.
        collect: Trajectory sampling.
        rft: Rejection fine-tuning.
        value_pretrain: Critic pretraining with the actor frozen.
        ppo: Agentic multi-turn PPO.
        logging: W&B / TensorBoard.
        rope_scaling: Written into the model's config.json (a derived model directory) when
            the sequences outgrow its native context, e.g. {"rope_type": "yarn", "factor": 4.0,
            "original_max_position_embeddings": 32768} for Qwen3 up to 131072 tokens; checked
            against the model's config at --dry-run (context.py).
    """

    run_dir: str = "runs/cuda_agent"
    model: str = "Qwen/Qwen3-8B"
    stages: tuple[str, ...] = STAGES
    tasks: TasksConfig = field(default_factory=TasksConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    warmup: PPOConfig = field(default_factory=PPOConfig)
    collect: CollectConfig = field(default_factory=CollectConfig)
    rft: RFTConfig = field(default_factory=RFTConfig)
    value_pretrain: PPOConfig = field(default_factory=lambda: PPOConfig(critic_only=True))
    ppo: PPOConfig = field(default_factory=PPOConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    rope_scaling: dict | None = None

    def __post_init__(self) -> None:
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown:
            raise ValueError(f"unknown stages {unknown}; stages are {list(STAGES)}")
        order = [STAGES.index(s) for s in self.stages]
        if order != sorted(set(order)):
            raise ValueError(f"stages must appear once each, in the order {list(STAGES)}")
        if "rft" in self.stages and "collect" not in self.stages:
            raise ValueError("stage rft needs collect before it")
        if not self.value_pretrain.critic_only:
            raise ValueError("value_pretrain.critic_only must stay true")
        check_rope_scaling(self.rope_scaling)
        self._check_batches()
        self._check_evaluator_pool()

    def _check_evaluator_pool(self) -> None:
        """Every episode in flight gets an env actor at once (a queued one would time out)."""
        launch = self.launch
        if launch.evaluator_gpus_per_node == 0:
            return
        engines = launch.num_nodes * launch.train_gpus_per_node // launch.tensor_parallel_size
        in_flight = engines * self.agent.max_concurrent_episodes
        pool = launch.num_nodes * launch.evaluator_gpus_per_node
        capacity = int(pool / self.agent.evaluator_gpus_per_env + 1e-9)
        if in_flight > capacity:
            raise ValueError(
                f"{engines} vLLM engines x agent.max_concurrent_episodes "
                f"{self.agent.max_concurrent_episodes} = {in_flight} env actors in flight, but "
                f"{pool} evaluator GPUs / agent.evaluator_gpus_per_env "
                f"{self.agent.evaluator_gpus_per_env:g} hold {capacity}; lower one of them "
                f"(evaluator_gpus_per_env <= {pool / in_flight:.4g})"
            )

    def _check_batches(self) -> None:
        """DeepSpeed's and OpenRLHF's batch rules for every stage that trains (see batches.py)."""
        launch = self.launch
        ppo_world = launch.num_nodes * launch.train_gpus_per_node
        for stage in self.stages:
            if stage in PPO_STAGES:
                where = stage.replace("-", "_")
                ppo = getattr(self, where)
                check_train_batch(where, ppo.train_batch_size, ppo.micro_batch_size, ppo_world,
                                  ppo.ring_attn_size)
                check_rollout_batch(where, ppo.rollout_batch_size, ppo.n_samples_per_prompt,
                                    ppo.train_batch_size, ppo.micro_batch_size, ppo_world,
                                    ppo.ring_attn_size)
            elif stage == "rft":
                check_train_batch("rft", self.rft.train_batch_size, self.rft.micro_batch_size,
                                  launch.sft_gpus, self.rft.ring_attn_size)

    @property
    def run_path(self) -> Path:
        """`run_dir` as an absolute path."""
        return Path(self.run_dir).resolve()


def check_rope_scaling(rope_scaling: dict | None) -> None:
    """Validate a `rope_scaling` setting.

    Raises:
        ValueError: Not a mapping with rope_type, factor > 1 and an integer original context.
    """
    if rope_scaling is None:
        return
    if not isinstance(rope_scaling, dict):
        raise ValueError("rope_scaling must be a mapping, e.g. {rope_type: yarn, factor: 4.0, "
                         "original_max_position_embeddings: 32768}")
    unknown = set(rope_scaling) - {"rope_type", "factor", "original_max_position_embeddings"}
    if unknown:
        raise ValueError(f"rope_scaling has unknown keys {sorted(unknown)}")
    if rope_scaling.get("rope_type") not in ("yarn", "linear", "dynamic"):
        raise ValueError("rope_scaling.rope_type must be 'yarn', 'linear' or 'dynamic'")
    if not float(rope_scaling.get("factor", 0)) > 1:
        raise ValueError("rope_scaling.factor must be greater than 1")
    original = rope_scaling.get("original_max_position_embeddings")
    if not isinstance(original, int) or original < 1:
        raise ValueError("rope_scaling.original_max_position_embeddings must be a positive "
                         "integer (Qwen3: 32768)")


def load_config(path: str | Path) -> PipelineConfig:
    """Read a pipeline YAML file; unknown keys raise ValueError naming the closest key."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    return from_dict(PipelineConfig, data)
