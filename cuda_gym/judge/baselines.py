"""Disk caches for per-task facts: baseline timings and task probes, one JSON file per key."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from cuda_gym.judge.config import JudgeConfig
from cuda_gym.judge.device import DeviceInfo


def baseline_key(task_hash: str, info: DeviceInfo, config: JudgeConfig) -> str:
    """Key of a task's baselines: task, device model, driver and versions, timing method.

    Not the tolerance mode: it changes how outputs are compared, not how the reference is
    timed, so runs in `paper` and `strict` mode share one set of baselines.
    """
    parts = [
        task_hash,
        info.device,
        info.name,
        info.torch_version,
        str(info.cuda_version),
        str(info.driver_version),
        str(config.warmup_runs),
        str(config.timed_runs),
        "tf32-off",
        "rotating-inputs",
        "l2-flush-persisting-off",
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def has_baselines(cached: dict | None, names) -> bool:
    """Whether a task's cached baselines hold a time for every one of `names`."""
    return bool(cached) and all("median_ms" in (cached.get(n) or {}) for n in names)


def probe_key(task_hash: str, info: DeviceInfo) -> str:
    """Key of a task's probe (usable distributions, fp64 support, trivial answers)."""
    # v3: the speed-of-light bound uses the GPU's nominal bandwidth (cuda_gym.judge.roofline).
    # v4: a float64 pass that disagrees with the task's own pass is not used (fp64_disagrees).
    # v5: the speed-of-light bound counts no convolution flops (cuda_gym.judge.roofline).
    # v7: input invariants and transform masks, strict mode's accumulation units (judge/contract).
    parts = [task_hash, info.device, info.name, info.torch_version, "probe-v7"]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


class JsonCache:
    """Small JSON documents stored as `<root>/<kind>/<key>.json`, written atomically."""

    def __init__(self, root: Path, kind: str) -> None:
        self.root = Path(root) / kind

    def get(self, key: str) -> dict | None:
        """The cached document, or None."""
        path = self.root / f"{key}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, document: dict) -> None:
        """Store a document atomically (safe with concurrent writers)."""
        self.root.mkdir(parents=True, exist_ok=True)
        # Unique per process and thread: two envs of one process may store the same key at once.
        tmp = self.root / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(document, indent=1))
        tmp.replace(self.root / f"{key}.json")

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold `key`'s lock across processes (an flock on `<root>/<key>.lock`).

        Used so that one process computes a missing document while others wait and then read
        it, instead of all computing it at once (on one GPU, concurrent probes of a large task
        can exhaust its memory).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{key}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
