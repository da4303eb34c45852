"""Prompt datasets for OpenRLHF: one row per task, `prompt` text plus a `label` JSON naming it.

Task sources are cuda_gym's task loaders (`cuda_gym.tasks`), named by a spec:

    builtin                   the hand-written built-in tasks (ids work in any env)
    synth, synth:train, synth:validation
                              the synthesised set shipped in cuda_gym (or one of its splits)
    dir:PATH                  KernelBench-format `.py` files under PATH (recursively)
    parquet:PATH              a task parquet file (ours, KernelBench's or Ops-6K's columns)
    kernelbench:PATH:LEVEL    one level of a local KernelBench checkout
    ops6k:PATH                the published CUDA-Agent-Ops-6K parquet

A label names a built-in task by id; any other task carries its source text (`task`), so the
env loads exactly the task the row names on any node, whatever its own task source.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class TaskEntry:
    """One task as a dataset row will name it.

    Attributes:
        task_id: Stable id within its source.
        description: One line shown in the prompt column.
        task: What `env.reset(options={"task": ...})` loads when it is not a built-in id (the
            task's source text); None for built-ins.
        source: The spec of the source it came from.
        split: The source's own split of the task ("train", "validation"), when it has one.
        digest: SHA-256 of the task's source text (finds one task under two ids).
    """

    task_id: str
    description: str
    task: str | None
    source: str
    split: str | None = None
    digest: str = ""


class TaskSource(Protocol):
    """A provider of tasks."""

    name: str

    def entries(self) -> list[TaskEntry]:
        """The tasks, in a stable order."""


class CudaGymTasks:
    """The tasks of one cuda_gym task loader (a `TaskSet`), loaded when first listed.

    Args:
        spec: The source spec (its name in labels and messages).
        load: Returns the `cuda_gym.tasks.TaskSet`.
        by_id: Labels name tasks by id (the built-in tasks), not by source text.
    """

    def __init__(self, spec: str, load, by_id: bool = False) -> None:
        self.name = spec
        self._load = load
        self._by_id = by_id
        self._entries: list[TaskEntry] | None = None

    def entries(self) -> list[TaskEntry]:
        """Every task of the set."""
        if self._entries is None:
            task_set = self._load()
            self._entries = [
                TaskEntry(t.task_id, t.description, None if self._by_id else t.source,
                          self.name, (task_set.meta.get(t.task_id) or {}).get("split"),
                          hashlib.sha256(t.source.encode()).hexdigest())
                for t in task_set.tasks
            ]
        return self._entries


def _existing(path: str, what: str) -> str:
    if not path or not Path(path).exists():
        raise ValueError(f"{what} not found: {path!r}")
    return str(Path(path).resolve())


def source_from_spec(spec: str) -> TaskSource:
    """A task source from its spec (see the module docstring).

    Raises:
        ValueError: Unknown kind, malformed spec, or a path that does not exist.
    """
    from cuda_gym import tasks

    kind, _, arg = spec.partition(":")
    if kind == "builtin" and not arg:
        return CudaGymTasks(spec, tasks.load_handwritten, by_id=True)
    if kind == "synth" and arg in ("", "train", "validation"):
        return CudaGymTasks(spec, lambda: tasks.load_builtin_set(arg or None))
    if kind == "dir":
        path = _existing(arg, "task directory")
        return CudaGymTasks(spec, lambda: tasks.load_task_dir(path))
    if kind == "parquet":
        path = _existing(arg, "parquet file")
        return CudaGymTasks(spec, lambda: tasks.load_task_parquet(path))
    if kind == "ops6k":
        path = _existing(arg, "Ops-6K parquet file")
        return CudaGymTasks(spec, lambda: tasks.load_ops6k(path))
    if kind == "kernelbench":
        root, _, level = arg.rpartition(":")
        if not root or not level:
            raise ValueError(f"task source {spec!r}: use kernelbench:PATH:LEVEL")
        path = _existing(root, "KernelBench checkout")
        if level.lower().removeprefix("level") not in ("1", "2", "3", "4"):
            raise ValueError(f"task source {spec!r}: KernelBench level must be 1-4")
        return CudaGymTasks(spec, lambda: tasks.load_kernelbench(path, level))
    raise ValueError(
        f"Unknown task source {spec!r}; use one of: builtin, synth[:train|:validation], "
        "dir:PATH, parquet:PATH, kernelbench:PATH:LEVEL, ops6k:PATH"
    )


def collect_entries(sources: list[TaskSource], include: list[str] | None = None,
                    split: str | None = None) -> list[TaskEntry]:
    """The tasks of `sources` (only `include` ids, only `split` where a source has splits).

    Raises:
        ValueError: One task id from two sources, or `include` names a missing task.
    """
    seen: dict[str, str] = {}
    entries = []
    for source in sources:
        for entry in source.entries():
            if include and entry.task_id not in include:
                continue
            if split and entry.split not in (None, split):
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
    return entries


def held_out(entries: list[TaskEntry], fraction: float, seed: int) -> set[str]:
    """Ids of the tasks (about `fraction` of them) held out by a stable hash of id and seed."""
    def score(entry: TaskEntry) -> float:
        digest = hashlib.sha256(f"{seed}:{entry.task_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    return {e.task_id for e in entries if score(e) < fraction}


def rows_from_entries(entries: list[TaskEntry], repeat: int = 1, seed: int = 0) -> list[dict]:
    """Rows `{"prompt", "label"}`; each task `repeat` times, shuffled with `seed`.

    The label is JSON text: `{"task_id", "seed", "source"}` plus `"task"` (the source text)
    for tasks that are not built-ins.
    """
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
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


def dataset_rows(sources: list[TaskSource], repeat: int = 1, seed: int = 0,
                 include: list[str] | None = None) -> list[dict]:
    """Rows of every task of `sources` (see `rows_from_entries`).

    Raises:
        ValueError: Duplicate task ids across sources, or `include` names a missing task.
    """
    return rows_from_entries(collect_entries(sources, include), repeat, seed)


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
    # A task's text wins over its id: the id names it only within its source.
    key = "task" if data.get("task") is not None else "task_id"
    options = {key: data[key]} if data.get(key) is not None else {}
    if not options:
        raise ValueError(f"label names no task ('task_id' or 'task'): {label!r}")
    seed = data.get("seed")
    return options, int(seed) if seed is not None else None


@dataclass
class TaskSplits:
    """The tasks of a run: trained on, validated on during training, held out for evaluation."""

    train: list[TaskEntry]
    validation: list[TaskEntry]
    evaluation: list[TaskEntry]

    def summary(self) -> str:
        """One line of counts."""
        return (f"{len(self.train)} training, {len(self.validation)} validation, "
                f"{len(self.evaluation)} evaluation tasks")


def task_splits(sources: list[str], validation_sources: list[str] = (),
                validation_fraction: float = 0.0, eval_sources: list[str] = (),
                include: list[str] | None = None, seed: int = 0) -> TaskSplits:
    """Load and split a run's tasks; no task (by source text) is both trained and held out.

    Training tasks come from `sources`, less those a source marks "validation" and a stable
    `validation_fraction` of the rest; those go to validation with `validation_sources`.

    Raises:
        ValueError: A bad source, no training task, or a held-out task also in training.
    """
    pool = collect_entries([source_from_spec(s) for s in sources], include)
    hashed = held_out([e for e in pool if e.split is None], validation_fraction, seed)
    train = [e for e in pool if e.split in (None, "train") and e.task_id not in hashed]
    validation = [e for e in pool if e.split == "validation" or e.task_id in hashed]
    validation += collect_entries([source_from_spec(s) for s in validation_sources])
    evaluation = collect_entries([source_from_spec(s) for s in eval_sources])
    if not train:
        raise ValueError(f"no training task in {list(sources)} (after include/validation)")
    trained = {e.digest: e.task_id for e in train}
    for name, held in (("validation", validation), ("evaluation", evaluation)):
        overlap = sorted(f"{e.task_id} (= {trained[e.digest]})" for e in held
                         if e.digest in trained)
        if overlap:
            raise ValueError(f"{len(overlap)} {name} tasks are also training tasks: "
                             f"{overlap[:5]}; held-out tasks must not be trained on")
    return TaskSplits(train, validation, evaluation)
