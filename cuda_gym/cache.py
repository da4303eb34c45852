"""The on-disk caches under $CUDA_GYM_CACHE: what lies where, how large, and clearing them.

`cuda-gym cache info` and `cuda-gym cache clear` are the command line. Only the folders named
in CACHE_KINDS are ever deleted, so pointing $CUDA_GYM_CACHE at a shared directory is safe.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Folder under the cache root -> (group cleared with it, what it holds).
CACHE_KINDS: dict[str, tuple[str, str]] = {
    "baselines": ("baselines", "eager and torch.compile timings per task and device"),
    "probes": ("baselines", "per-task facts measured once (output sizes, memory estimates)"),
    "builds": ("builds", "compiled kernels/ extensions, keyed by their sources and flags"),
    "incremental": ("builds", "per-file objects reused when one kernel file changes"),
    "objects": ("builds", "objects of kernel-only (plain library) builds"),
    "pch": ("builds", "precompiled torch headers"),
    "inline_builds": ("builds", "extensions that solutions build with load_inline, by source"),
    "inline": ("builds", "torch extensions built by the judge's own workers"),
    "library_pages": ("builds", "code-page index of the machine's libraries (copy check)"),
    "assembler": ("builds", "the assembler guard kernels/ builds run (refuses .incbin)"),
    "inductor": ("all", "torch.compile (inductor) caches of the baselines"),
    "hf": ("all", "task sets downloaded from Hugging Face"),
}
GROUPS = ("baselines", "builds", "all")


def cache_root() -> Path:
    """$CUDA_GYM_CACHE, else ~/.cache/cuda_gym.

    The same rule as `cuda_gym.judge.config.default_cache_dir` (a test pins the two together),
    repeated here so that `cuda-gym cache` does not import torch.
    """
    env = os.environ.get("CUDA_GYM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "cuda_gym"


def _size(path: Path) -> tuple[int, int]:
    """Total bytes and file count under `path` (symlinks not followed)."""
    total = files = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
                files += 1
            except OSError:  # removed while we walked
                continue
    return total, files


def cache_report(root: Path | None = None) -> dict:
    """What is cached: the root, and per known folder its path, size, files and group."""
    root = Path(root) if root is not None else cache_root()
    entries = []
    for name, (group, what) in CACHE_KINDS.items():
        path = root / name
        size, files = _size(path) if path.is_dir() else (0, 0)
        entries.append(
            {
                "name": name,
                "path": str(path),
                "exists": path.is_dir(),
                "bytes": size,
                "files": files,
                "cleared_by": "--all" if group == "all" else f"--{group} or --all",
                "holds": what,
            }
        )
    return {
        "root": str(root),
        "from_env": "CUDA_GYM_CACHE" in os.environ,
        "total_bytes": sum(e["bytes"] for e in entries),
        "entries": entries,
    }


def format_report(report: dict) -> str:
    """The text table of `cuda-gym cache info`."""
    origin = "$CUDA_GYM_CACHE" if report["from_env"] else "default; set $CUDA_GYM_CACHE to move it"
    lines = [
        f"cache root: {report['root']} ({origin})",
        f"{'folder':<12}{'size':>11}{'files':>8}  {'cleared by':<22}holds",
    ]
    for e in report["entries"]:
        size = f"{e['bytes'] / 2**20:.1f} MiB" if e["exists"] else "-"
        lines.append(f"{e['name']:<12}{size:>11}{e['files']:>8}  {e['cleared_by']:<22}{e['holds']}")
    lines.append(f"{'total':<12}{report['total_bytes'] / 2**20:>7.1f} MiB")
    return "\n".join(lines)


def clear_cache(groups: str | list[str], root: Path | None = None) -> list[tuple[str, int]]:
    """Delete the cache folders of `groups` ("baselines", "builds" or "all").

    A judge running at the same time rebuilds or re-measures what it no longer finds.

    Returns:
        (path, bytes) of each folder removed.

    Raises:
        ValueError: An unknown group.
    """
    groups = [groups] if isinstance(groups, str) else list(groups)
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        raise ValueError(f"unknown cache group(s) {unknown}; use {', '.join(GROUPS)}")
    root = Path(root) if root is not None else cache_root()
    removed = []
    for name, (group, _what) in CACHE_KINDS.items():
        path = root / name
        if path.is_dir() and ("all" in groups or group in groups):
            size, _files = _size(path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append((str(path), size))
    return removed
