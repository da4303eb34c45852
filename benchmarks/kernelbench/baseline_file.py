"""A file of eager and torch.compile baseline times that harness runs share and commit.

The judge caches baselines per key (task hash, device model, torch/CUDA versions, timing
settings; see `cuda_gym.judge.baselines.baseline_key`) under its cache directory. This file
carries those entries between machines and runs: at the start its entries go into the judge's
cache (so they are not timed again), at the end the run's baselines are merged back. An entry is
used only where its key matches, i.e. on the same GPU model and software.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cuda_gym.judge.baselines import JsonCache

FORMAT = "cuda_gym-kernelbench-baselines-1"

# Baseline files that ship with the harness (measured on our GPUs, e.g. h200.json). They seed
# the judge's cache at the start of every run, after the run's own file; an entry is used only
# where its key matches (same GPU model and software), so elsewhere they cost nothing.
SHIPPED_DIR = Path(__file__).with_name("baselines")


# What an entry records about where it was measured (besides the problem): a run's own entries
# whose key differs from the stored one differ in one of these, or in something unrecorded.
MATCH_FIELDS = ("task_hash", "torch", "cuda", "driver", "warmup_runs", "timed_runs")


def shipped_baseline_files() -> list[Path]:
    """The baseline files shipped in SHIPPED_DIR."""
    return sorted(SHIPPED_DIR.glob("*.json"))


class BaselineFile:
    """Baseline entries keyed by the judge's baseline key.

    Args:
        path: The JSON file (missing: starts empty).

    Raises:
        ValueError: The file exists but is not a baselines file.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.entries: dict[str, dict] = {}
        if self.path.is_file():
            data = json.loads(self.path.read_text())
            if data.get("format") != FORMAT:
                raise ValueError(f"{self.path} is not a baselines file (format {FORMAT!r})")
            self.entries = dict(data.get("entries", {}))

    def seed_cache(self, cache: JsonCache) -> int:
        """Put entries missing from the judge's cache into it; return how many."""
        added = 0
        for key, entry in self.entries.items():
            if cache.get(key) is None and entry.get("baselines"):
                cache.put(key, entry["baselines"])
                added += 1
        return added

    def collect(self, cache: JsonCache, wanted: dict[str, dict]) -> int:
        """Merge the cache's baselines for `wanted` (key -> description) in; return how many."""
        added = 0
        for key, meta in wanted.items():
            baselines = cache.get(key)
            if baselines:
                self.entries[key] = {**meta, "baselines": baselines}
                added += 1
        return added

    def mismatches(self, wanted: dict[str, dict]) -> tuple[int, list[str]]:
        """Entries for the same problems on the same GPU model whose keys `wanted` lacks.

        Such entries were measured under other software or settings (another driver, torch or
        CUDA version, other timing settings, or another version of the problem) and do not
        apply. Returns how many, and the recorded fields in which they differ.
        """
        matched = {wanted[key]["problem"] for key in self.entries if key in wanted}
        by_problem = {meta["problem"]: meta for meta in wanted.values()}
        count, differ = 0, set()
        for entry in self.entries.values():
            meta = by_problem.get(entry.get("problem"))
            if meta is None or meta["problem"] in matched:
                continue  # not wanted, or this file has the problem's baselines for here too
            if entry.get("device_name") != meta["device_name"]:
                continue
            count += 1
            differ |= {f for f in MATCH_FIELDS if f in entry and entry[f] != meta.get(f)}
        return count, sorted(differ)

    def save(self) -> None:
        """Write the file atomically, entries sorted by problem."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        ordered = dict(
            sorted(self.entries.items(), key=lambda kv: (kv[1].get("problem", ""), kv[0]))
        )
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"format": FORMAT, "entries": ordered}, indent=1) + "\n")
        tmp.replace(self.path)
