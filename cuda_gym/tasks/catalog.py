"""Task sources named on the command line: open them, list their tasks, find a task by id.

`open_sources("all")` gives the hand-written tasks and the shipped synthesised set,
`open_sources("kernelbench:~/KernelBench")` every level of a checkout, and
`find_task("synth_0_02522")` a task from whichever source holds its id.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from cuda_gym.errors import UnknownTaskError
from cuda_gym.tasks.collection import TaskSet
from cuda_gym.tasks.sources import (
    builtin_set_available,
    load_builtin_set,
    load_handwritten,
    load_kernelbench,
    load_task,
    load_task_dir,
    load_task_parquet,
)
from cuda_gym.tasks.task import Task

SOURCE_HELP = (
    "builtin (the hand-written tasks), synth or synth:train|validation (the synthesised set "
    "shipped with the package), kernelbench:DIR[:LEVEL] (a KernelBench checkout), "
    "parquet:FILE, dir:DIR (KernelBench-format .py files), or all (builtin and synth)"
)


def open_sources(spec: str) -> list[TaskSet]:
    """The task sets a `--source` value names (see SOURCE_HELP).

    Raises:
        UnknownTaskError: `spec` is not a source this function understands.
        FileNotFoundError: The named file or directory does not exist.
        DataUnavailableError: "synth" in an installation that ships no set.
    """
    if spec == "all":
        sets = [load_handwritten()]
        return sets + ([load_builtin_set()] if builtin_set_available() else [])
    if spec == "builtin":
        return [load_handwritten()]
    if spec == "synth" or spec.startswith("synth:"):
        return [load_builtin_set(spec.partition(":")[2] or None)]
    kind, _, rest = spec.partition(":")
    if kind == "kernelbench" and rest:
        return _kernelbench_sets(rest)
    if kind == "parquet" and rest:
        return [load_task_parquet(Path(rest).expanduser())]
    if kind == "dir" and rest:
        return [load_task_dir(Path(rest).expanduser())]
    raise UnknownTaskError(f"Unknown task source {spec!r}; use {SOURCE_HELP}.")


def _kernelbench_sets(rest: str) -> list[TaskSet]:
    path, _, level = rest.rpartition(":")
    if path and level.lower().removeprefix("level").isdigit():
        return [load_kernelbench(Path(path).expanduser(), level)]
    root = Path(rest).expanduser()
    sets = []
    for n in (1, 2, 3, 4):
        try:
            sets.append(load_kernelbench(root, n))
        except FileNotFoundError:
            continue
    if not sets:
        raise FileNotFoundError(
            f"no level1/ .. level4/ under {root} or {root / 'KernelBench'}; pass a KernelBench "
            "checkout"
        )
    return sets


def find_task(task_id: str, source: str | None = None) -> Task:
    """A task by id from `source`, else from a file path, the built-in tasks or the shipped set.

    Raises:
        UnknownTaskError: No source holds the id; the message names the sources searched and
            suggests close ids.
    """
    if source is None:
        return load_task(task_id)  # files, hand-written ids and the shipped synthesised set
    sets = open_sources(source)
    for task_set in sets:
        if task_id in task_set:
            return task_set.get(task_id)
    ids = [i for s in sets for i in s.ids()]
    close = difflib.get_close_matches(task_id, ids, n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise UnknownTaskError(
        f"Unknown task {task_id!r} in source {source!r} ({len(ids)} tasks).{hint} "
        f"`cuda-gym tasks list --source {source}` lists them."
    )
