"""Batch-size rules a launch must satisfy, checked when the config is read instead of at start-up.

DeepSpeed (runtime/config.py, `_batch_assertion`) requires, for every engine,

    train_batch_size == micro_batch_per_gpu * gradient_accumulation_steps * world_size

with `gradient_accumulation_steps = train_batch_size // (micro_batch_per_gpu * world_size)`.
OpenRLHF hands each engine `train_batch_size = train.batch_size * ring_attn_size` and runs it on
`world_size` processes, of which `world_size / ring_attn_size` are data-parallel, so the rule
reads: `train.batch_size` is a multiple of `micro_batch_size * data-parallel size`.

OpenRLHF's PPO adds (cli/train_ppo_ray.py and the trainer loop): a rollout makes at least one
micro batch per data-parallel rank; the samples of one rollout split evenly across the
data-parallel ranks; and they fill whole optimizer steps (the replay buffer is read in full, so a
partial step would carry gradients into the next one).
"""

from __future__ import annotations


def deepspeed_grad_accum(train_batch: int, micro_batch: int, world_size: int) -> int:
    """DeepSpeed's gradient accumulation steps for these sizes.

    Raises:
        ValueError: DeepSpeed would reject them (`train_batch != micro * grad_accum * world`).
    """
    if min(train_batch, micro_batch, world_size) < 1:
        raise ValueError("batch sizes and world size must be at least 1")
    grad_accum = train_batch // (micro_batch * world_size)
    if grad_accum < 1 or train_batch != micro_batch * grad_accum * world_size:
        raise ValueError(
            f"DeepSpeed rejects train_batch_size {train_batch} with micro batch {micro_batch} "
            f"on {world_size} GPUs: {train_batch} != {micro_batch} * {grad_accum} * "
            f"{world_size}; use a multiple of {micro_batch * world_size}"
        )
    return grad_accum


def data_parallel_size(world_size: int, ring_attn_size: int) -> int:
    """Data-parallel ranks of `world_size` training processes in ring-attention groups.

    Raises:
        ValueError: `ring_attn_size` does not divide `world_size`.
    """
    if ring_attn_size < 1 or world_size % ring_attn_size:
        raise ValueError(
            f"ring_attn_size {ring_attn_size} must divide the {world_size} training GPUs"
        )
    return world_size // ring_attn_size


def check_train_batch(
    where: str, train_batch: int, micro_batch: int, world_size: int, ring_attn_size: int = 1
) -> int:
    """Check one DeepSpeed engine as OpenRLHF configures it; return its accumulation steps.

    Raises:
        ValueError: Naming `where` (e.g. "ppo") and the multiple to use.
    """
    dp = data_parallel_size(world_size, ring_attn_size)
    try:
        return deepspeed_grad_accum(train_batch * ring_attn_size, micro_batch, world_size)
    except ValueError:
        raise ValueError(
            f"{where}.train_batch_size {train_batch} must be a multiple of micro_batch_size "
            f"{micro_batch} x {dp} data-parallel GPUs ({world_size} training GPUs / "
            f"ring_attn_size {ring_attn_size}) = {micro_batch * dp}, or DeepSpeed refuses to "
            "start"
        ) from None


def check_rollout_batch(
    where: str,
    rollout_batch: int,
    n_samples: int,
    train_batch: int,
    micro_batch: int,
    world_size: int,
    ring_attn_size: int = 1,
) -> None:
    """Check OpenRLHF's PPO relations between a rollout and the training batches.

    Raises:
        ValueError: Naming `where` and the relation broken.
    """
    dp = data_parallel_size(world_size, ring_attn_size)
    samples = rollout_batch * n_samples
    if samples // micro_batch < dp:
        raise ValueError(
            f"{where}: a rollout of {rollout_batch} x {n_samples} samples makes fewer micro "
            f"batches of {micro_batch} than the {dp} data-parallel GPUs (OpenRLHF refuses)"
        )
    if samples % dp:
        raise ValueError(
            f"{where}: rollout_batch_size x n_samples_per_prompt = {samples} does not split "
            f"evenly across {dp} data-parallel GPUs"
        )
    if samples % train_batch:
        raise ValueError(
            f"{where}: rollout_batch_size x n_samples_per_prompt = {samples} must be a multiple "
            f"of train_batch_size {train_batch} (whole optimizer steps per rollout)"
        )
