"""Prompt datasets for OpenRLHF: one row per task, `prompt` text plus a `label` JSON naming it.

Task sources plug in through `TaskSource` (anything with `name` and `entries()`); specs on
the command line: `builtin` (cuda_gym's built-in tasks) or `dir:PATH` (KernelBench-format
`.py` files). Add a source by adding a class and an entry to SOURCES.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class TaskEntry:
    """One task as a dataset row will name it.

    Attributes:
        task_id: Stable id (built-in id or file stem).
        description: One line shown in the prompt column.
        task: What `env.reset(options={"task": ...})` loads when it is not a built-in id
            (an absolute file path); None for built-ins.
        source: Name of the source it came from.
    """

    task_id: str
    description: str
    task: str | None
    source: str


class TaskSource(Protocol):
    """A provider of tasks."""

    name: str

    def entries(self) -> list[TaskEntry]:
        """The tasks, in a stable order."""


class BuiltinTasks:
    """cuda_gym's built-in tasks."""

    name = "builtin"

    def entries(self) -> list[TaskEntry]:
        """Every built-in task."""
        from cuda_gym import builtin_task_ids, load_task

        return [TaskEntry(i, load_task(i).description, None, self.name)
                for i in builtin_task_ids()]


class TaskDirectory:
    """KernelBench-format `.py` files in one directory (each checked when listed)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_dir():
            raise ValueError(f"task directory not found: {self.path}")
        self.name = f"dir:{self.path}"

    def entries(self) -> list[TaskEntry]:
        """Every `.py` file, loaded through cuda_gym's task loader (bad files raise)."""
        from cuda_gym import load_task

        out = []
        for file in sorted(self.path.glob("*.py")):
            task = load_task(str(file))
            out.append(TaskEntry(file.stem, task.description, str(file), self.name))
        return out


SOURCES = {"builtin": lambda arg: BuiltinTasks(), "dir": TaskDirectory}


def source_from_spec(spec: str) -> TaskSource:
    """A task source from `builtin` or `dir:PATH`.

    Raises:
        ValueError: Unknown source kind.
    """
    kind, _, arg = spec.partition(":")
    if kind not in SOURCES:
        raise ValueError(f"Unknown task source {spec!r}; use one of: builtin, dir:PATH")
    return SOURCES[kind](arg)


def dataset_rows(sources: list[TaskSource], repeat: int = 1, seed: int = 0,
                 include: list[str] | None = None) -> list[dict]:
    """Rows `{"prompt", "label"}`; each task `repeat` times, shuffled with `seed`.

    The label is JSON text: `{"task_id", "seed", "source"}` plus `"task"` for file tasks.
    Duplicate task ids across sources raise ValueError.
    """
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    seen: dict[str, str] = {}
    entries = []
    for source in sources:
        for entry in source.entries():
            if include and entry.task_id not in include:
                continue
            if entry.task_id in seen:
                raise ValueError(f"task id {entry.task_id!r} comes from both "
                                 f"{seen[entry.task_id]} and {entry.source}")
            seen[entry.task_id] = entry.source
            entries.append(entry)
    if include:
        missing = sorted(set(include) - set(seen))
        if missing:
            raise ValueError(f"tasks not found in the sources: {missing}")
    rng = random.Random(seed)
    rows = []
    for _ in range(repeat):
        for entry in entries:
            label = {"task_id": entry.task_id, "seed": rng.randrange(2**31),
                     "source": entry.source}
            if entry.task is not None:
                label["task"] = entry.task
            prompt = f"Task {entry.task_id}: {entry.description}".strip()
            rows.append({"prompt": prompt, "label": json.dumps(label, sort_keys=True)})
    rng.shuffle(rows)
    return rows


def write_dataset(rows: list[dict], path: str | Path) -> Path:
    """Write rows as JSONL (OpenRLHF's `--data.prompt_dataset` reads local .jsonl files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def parse_label(label: Any) -> tuple[dict, int | None]:
    """The env reset options and seed named by a dataset label (JSON text or a dict).

    Raises:
        ValueError: The label is not JSON, not an object, or names no task.
    """
    data = json.loads(label) if isinstance(label, str) else label
    if not isinstance(data, dict):
        raise ValueError(f"label must be a JSON object naming the task, got {label!r}")
    options = {k: data[k] for k in ("task_id", "task") if data.get(k) is not None}
    if not options:
        raise ValueError(f"label names no task ('task_id' or 'task'): {label!r}")
    seed = data.get("seed")
    return options, int(seed) if seed is not None else None
