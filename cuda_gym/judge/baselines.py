"""A disk cache of baseline timings (eager, torch.compile) keyed by task, device and software."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from cuda_gym.judge.config import JudgeConfig
from cuda_gym.judge.device import DeviceInfo


def baseline_key(task_hash: str, info: DeviceInfo, config: JudgeConfig) -> str:
    """Cache key: task content, device model, torch/CUDA versions and the timing method."""
    parts = [
        task_hash,
        info.device,
        info.name,
        info.torch_version,
        str(info.cuda_version),
        str(config.warmup_runs),
        str(config.timed_runs),
        "tf32-off",
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


class BaselineCache:
    """Baseline timings stored as one small JSON file per (task, device, software) key."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "baselines"

    def get(self, key: str) -> dict | None:
        """The cached {"eager": {...}, "compile": {...}} timings, or None."""
        path = self.root / f"{key}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, timings: dict) -> None:
        """Store timings atomically (safe with concurrent writers)."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(timings, indent=1))
        tmp.replace(self.root / f"{key}.json")
