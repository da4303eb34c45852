"""Per-problem records on disk: out/records/level<L>/<stem>.json, written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path

from benchmarks.kernelbench.problems import Problem

# A record with one of these statuses is final; "error" records are run again on resume, and
# "out_of_memory" ones (the device ran out of memory while other problems shared it) are run
# again alone on their GPU at the end of the run.
FINISHED = ("done", "missing")
OUT_OF_MEMORY = "out_of_memory"


def record_path(out: Path, problem: Problem) -> Path:
    """Where a problem's record lives."""
    return out / "records" / f"level{problem.level}" / f"{problem.name}.json"


def read_record(out: Path, problem: Problem) -> dict | None:
    """The problem's record, or None when absent or unreadable."""
    try:
        return json.loads(record_path(out, problem).read_text())
    except (OSError, ValueError):
        return None


def write_record(out: Path, problem: Problem, record: dict) -> None:
    """Write a record atomically (a reader never sees half a file)."""
    path = record_path(out, problem)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=repr) + "\n")
    tmp.replace(path)
