"""Run an OpenRLHF CLI module with agent_trainer's patches.

    python -m agent_trainer.openrlhf_main openrlhf.cli.train_ppo_ray --actor.model_name_or_path ...
    python -m deepspeed.launcher.runner --num_gpus 8 --module agent_trainer.openrlhf_main \
        openrlhf.cli.train_sft --data.dataset sft.jsonl ...

train_ppo_ray: the multi-turn GAE patch (multiturn_gae.py) is installed in this process, and Ray
is started with it as the `worker_process_setup_hook`, with the environment variables OpenRLHF's
own `ray.init` sets (it skips its `ray.init` when Ray is already up). train_sft: OpenRLHF's
SFTDataset is replaced by the token-row dataset (token_sft.py). Then the module runs as
`__main__` with the remaining arguments (DeepSpeed's `--local_rank=N` included).
"""

from __future__ import annotations

import os
import runpy
import sys

from agent_trainer import token_sft
from agent_trainer.multiturn_gae import SETUP_HOOK, install


def ray_runtime_env() -> dict:
    """OpenRLHF 0.11.2's runtime env (train_ppo_ray.train) plus the GAE setup hook."""
    return {
        "env_vars": {
            "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
            "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
            "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get(
                "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"
            ),
        },
        "worker_process_setup_hook": SETUP_HOOK,
    }


def main(argv: list[str] | None = None) -> None:
    """Patch, start Ray, and run `argv[0]` (an OpenRLHF module) with the flags `argv[1:]`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    modules = [a for a in argv if a.startswith("openrlhf.cli.")]
    if not modules:
        raise SystemExit("usage: python -m agent_trainer.openrlhf_main openrlhf.cli.MODULE ...")
    module = modules[0]
    argv.remove(module)  # DeepSpeed's launcher puts --local_rank=N before it
    if module.endswith(".train_sft"):
        token_sft.install()
    else:
        install()
        import ray

        if not ray.is_initialized():
            ray.init(runtime_env=ray_runtime_env())
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
