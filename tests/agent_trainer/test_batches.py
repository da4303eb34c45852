"""Batch sizes: every shipped recipe passes DeepSpeed's own config check, and ours agrees with it.

DeepSpeed's `DeepSpeedConfig` reads the world size from `deepspeed.comm`; with no process group
on a CPU machine it would see one GPU, so the tests pin `get_rank`/`get_world_size` to the
launch's GPU count and let DeepSpeed's own `_batch_assertion` judge the sizes OpenRLHF's
strategy passes it (`train.batch_size * ring_attn_size`, `train.micro_batch_size`).
"""

from pathlib import Path

import pytest

import agent_trainer
from agent_trainer.batches import check_rollout_batch, check_train_batch
from agent_trainer.openrlhf_args import parse_openrlhf_args
from agent_trainer.pipeline_config import load_config
from agent_trainer.stages import plan_stage

deepspeed = pytest.importorskip("deepspeed", reason="DS_BUILD_OPS=0 pip install deepspeed==0.19.6")
from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402

RECIPES = sorted((Path(agent_trainer.__file__).parent / "recipes").glob("*.yaml"))


@pytest.fixture
def world(monkeypatch):
    """Set the world size DeepSpeed's config sees."""
    import deepspeed.comm as dist

    def pin(size):
        monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: size)

    return pin


def deepspeed_accepts(world, train_batch, micro, world_size, ring=1):
    """DeepSpeed's verdict on the config OpenRLHF's strategy builds; its accumulation steps."""
    world(world_size)
    config = {"train_batch_size": train_batch * ring, "train_micro_batch_size_per_gpu": micro,
              "zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}
    try:
        return DeepSpeedConfig(config).gradient_accumulation_steps
    except AssertionError:
        return None


def engines(recipe):
    """(stage, train batch, micro batch, world size, ring size) of every DeepSpeed run."""
    cfg = load_config(recipe)
    for stage in cfg.stages:
        for command in plan_stage(cfg, stage, recipe).commands:
            if not command.openrlhf_module:
                continue
            args = parse_openrlhf_args(command.openrlhf_module, list(command.openrlhf_args))
            if command.openrlhf_module.endswith("train_sft"):
                world_size = int(command.argv[command.argv.index("--num_gpus") + 1])
            else:
                world_size = args.actor.num_nodes * args.actor.num_gpus_per_node
            yield (stage, args.train.batch_size, args.train.micro_batch_size, world_size,
                   args.ds.ring_attn_size)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_shipped_recipe_passes_deepspeeds_batch_check(recipe, world):
    seen = []
    for stage, train, micro, world_size, ring in engines(recipe):
        steps = deepspeed_accepts(world, train, micro, world_size, ring)
        assert steps is not None, (recipe.stem, stage, train, micro, world_size, ring)
        assert steps == check_train_batch(stage, train, micro, world_size, ring)
        seen.append(stage)
    assert seen == ["warmup", "rft", "value-pretrain", "ppo"]


# The sizes the issue found failing (node: 6 training GPUs, multi_node: 24) and some that pass.
CASES = [(1024, 1, 6, 1), (512, 1, 6, 1), (64, 1, 6, 1), (1024, 1, 24, 1), (128, 1, 6, 1),
         (960, 1, 6, 1), (960, 1, 24, 4), (960, 2, 6, 2), (32, 1, 1, 1), (30, 4, 3, 1),
         (8, 1, 16, 1), (64, 1, 8, 2), (100, 3, 2, 1)]


@pytest.mark.parametrize("train, micro, world_size, ring", CASES)
def test_our_check_agrees_with_deepspeed(train, micro, world_size, ring, world):
    expected = deepspeed_accepts(world, train, micro, world_size, ring)
    if expected is None:
        with pytest.raises(ValueError, match="multiple of"):
            check_train_batch("ppo", train, micro, world_size, ring)
    else:
        assert check_train_batch("ppo", train, micro, world_size, ring) == expected


def test_the_old_node_recipe_is_refused_when_read(tmp_path):
    text = (RECIPES[1].read_text()
            .replace("train_batch_size: 960, task_repeat: 35", "train_batch_size: 1024, "
                     "task_repeat: 35")
            .replace("rollout_batch_size: 120", "rollout_batch_size: 128"))
    path = tmp_path / "node.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"ppo.train_batch_size 1024 must be a multiple of "
                                         r"micro_batch_size 1 x 3 data-parallel GPUs"):
        load_config(path)


def test_rollout_relations():
    check_rollout_batch("ppo", 120, 8, 960, 1, 6)
    with pytest.raises(ValueError, match="split evenly"):
        check_rollout_batch("ppo", 5, 1, 5, 1, 2)
    with pytest.raises(ValueError, match="whole optimizer steps"):
        check_rollout_batch("ppo", 12, 8, 64, 1, 4)
    with pytest.raises(ValueError, match="fewer micro batches"):
        check_rollout_batch("ppo", 1, 2, 2, 1, 4)
    with pytest.raises(ValueError, match="must divide"):
        check_train_batch("rft", 64, 1, 6, 4)


def test_the_evaluator_pool_must_hold_every_episode_in_flight(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text(RECIPES[1].read_text().replace("max_concurrent_episodes: 8",
                                                   "max_concurrent_episodes: 16"))
    with pytest.raises(ValueError, match=r"6 vLLM engines x agent.max_concurrent_episodes 16 = "
                                         r"96 env actors in flight, but 2 evaluator GPUs"):
        load_config(path)
