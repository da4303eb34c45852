"""Facts about the machine and software a harness run used, for the report."""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import cuda_gym
from cuda_gym.judge.device import device_info


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_commit(path: Path, own_checkout: bool = False) -> str | None:
    """The commit checked out at `path` (with "+dirty" for local changes), or None.

    own_checkout: `path` must be a checkout of its own, not a folder inside another repository
    (a KernelBench copy unpacked inside this one would otherwise report this one's commit).
    """
    if own_checkout:
        top = _run(["git", "rev-parse", "--show-toplevel"], cwd=path)
        if top is None or Path(__file__).resolve().is_relative_to(Path(top).resolve()):
            return None
    commit = _run(["git", "rev-parse", "HEAD"], cwd=path)
    if commit is None:
        return None
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=path)
    return commit + ("+dirty" if dirty else "")


# Names the tree that runs when git cannot (a copy of the working tree without its metadata, or
# with stale metadata, as on a lent GPU machine): set it to the commit the copy was made from.
HARNESS_COMMIT_ENV = "CUDA_GYM_HARNESS_COMMIT"


@functools.cache
def harness_commit() -> str | None:
    """The commit of this harness's tree: $CUDA_GYM_HARNESS_COMMIT when set, else git's."""
    return os.environ.get(HARNESS_COMMIT_ENV) or git_commit(Path(__file__).resolve().parent)


def gpu_driver() -> dict | None:
    """GPU names and driver version from nvidia-smi, or None without it."""
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if not out:
        return None
    rows = [line.split(", ") for line in out.splitlines() if line.strip()]
    return {
        "gpus": [r[0] for r in rows],
        "driver_version": rows[0][1] if rows and len(rows[0]) > 1 else None,
    }


def system_facts(device: str, kernelbench_dir: Path) -> dict:
    """Device, versions, and the commits of this harness and of the KernelBench checkout."""
    import torch

    info = device_info(device)
    facts = {
        "device": info.to_dict(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_gym": cuda_gym.__version__,
        "harness_commit": harness_commit(),
        "kernelbench_commit": git_commit(kernelbench_dir, own_checkout=True),
    }
    if device == "cuda":
        facts["nvidia_smi"] = gpu_driver()
    return facts
