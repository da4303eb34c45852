"""Where cuda_gym keeps what it computes once: $CUDA_GYM_CACHE, else ~/.cache/cuda_gym."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "CUDA_GYM_CACHE"


def default_cache_dir() -> Path:
    """The cache directory (builds, probes, baselines, downloads): $CUDA_GYM_CACHE or ~/.cache."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "cuda_gym"
