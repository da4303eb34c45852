"""TaskSet: an ordered, id-addressed collection of tasks with per-task metadata."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field

from cuda_gym.errors import UnknownTaskError
from cuda_gym.tasks.task import Task


@dataclass
class TaskSet:
    """Tasks from one source, in a fixed order.

    Attributes:
        name: Where the set came from (e.g. "synth", "kernelbench:level1", a path).
        tasks: The tasks, in order.
        meta: Per task id: split, name, provenance and whatever the source recorded.
        skipped: Rows or files that were not valid KernelBench-format tasks, with the reason.
    """

    name: str
    tasks: list[Task] = field(default_factory=list)
    meta: dict[str, dict] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._by_id = {t.task_id: t for t in self.tasks}
        if len(self._by_id) != len(self.tasks):
            raise ValueError(f"task set {self.name!r} has repeated task ids")

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._by_id

    def ids(self) -> list[str]:
        """Task ids in order."""
        return [t.task_id for t in self.tasks]

    def get(self, task_id: str) -> Task:
        """The task with this id.

        Raises:
            UnknownTaskError: No such id; the message suggests close matches.
        """
        if task_id in self._by_id:
            return self._by_id[task_id]
        close = difflib.get_close_matches(task_id, self.ids(), n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownTaskError(f"Unknown task {task_id!r} in task set {self.name!r}.{hint}")

    def split(self, split: str) -> TaskSet:
        """The tasks whose metadata says `split` ("train", "validation")."""
        kept = [t for t in self.tasks if self.meta.get(t.task_id, {}).get("split") == split]
        if not kept:
            splits = sorted({m.get("split") for m in self.meta.values() if m.get("split")})
            raise UnknownTaskError(
                f"task set {self.name!r} has no {split!r} split (splits: {splits or 'none'})"
            )
        meta = {t.task_id: self.meta[t.task_id] for t in kept}
        return TaskSet(f"{self.name}:{split}", kept, meta)
