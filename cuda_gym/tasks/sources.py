"""Task sources: the built-in sets, directories of task files, parquet files, KernelBench, Ops-6K.

from cuda_gym.tasks import load_builtin_set, load_kernelbench, load_task_dir
tasks = load_builtin_set(split="train")             # shipped synthesised set (offline)
kb1 = load_kernelbench("/path/to/KernelBench", level=1)  # ids like "level1/19_ReLU"
ops = load_ops6k("/path/to/ops6k.parquet")           # or load_ops6k() when online
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import re
from pathlib import Path

from cuda_gym.errors import DataUnavailableError, TaskFormatError, UnknownTaskError
from cuda_gym.tasks.collection import TaskSet
from cuda_gym.tasks.task import (
    Task,
    builtin_task,
    builtin_task_ids,
    task_from_file,
    task_from_string,
)

logger = logging.getLogger(__name__)

DATA_DIR = Path(__file__).parent / "data"
BUILTIN_SET_PATH = DATA_DIR / "synth_builtin.parquet"
KERNELBENCH_HF = "ScalingIntelligence/KernelBench"
OPS6K_HF = "BytedTsinghua-SIA/CUDA-Agent-Ops-6K"
CODE_COLUMNS = ("source", "code", "pytorch_code", "module_code", "model_code", "problem", "task")
ID_COLUMNS = ("task_id", "problem_id", "id", "uid", "name")


def load_handwritten() -> TaskSet:
    """The hand-written built-in tasks (`cuda_gym/tasks/builtin/*.py`)."""
    tasks = [builtin_task(i) for i in builtin_task_ids()]
    return TaskSet("builtin", tasks, {t.task_id: {"name": t.task_id} for t in tasks})


def builtin_set_available() -> bool:
    """Whether the package ships a synthesised task set."""
    return BUILTIN_SET_PATH.is_file()


def load_builtin_set(split: str | None = None) -> TaskSet:
    """The synthesised task set shipped inside the package.

    Args:
        split: "train" or "validation"; None for all.

    Raises:
        DataUnavailableError: This installation ships no set.
    """
    if not builtin_set_available():
        raise DataUnavailableError(
            f"no built-in synthesised task set at {BUILTIN_SET_PATH}; generate one with "
            "`cuda-gym synth --n 500 --device cuda --out cuda_gym/tasks/data/synth_builtin.parquet`"
        )
    tasks = _cached_parquet(str(BUILTIN_SET_PATH), BUILTIN_SET_PATH.stat().st_mtime_ns)
    tasks = TaskSet("synth", tasks.tasks, tasks.meta, tasks.skipped)
    return tasks.split(split) if split else tasks


@functools.lru_cache(maxsize=8)
def _cached_parquet(path: str, mtime_ns: int) -> TaskSet:
    return load_task_parquet(path)


def load_task_dir(root: str | Path, pattern: str = "*.py") -> TaskSet:
    """Every KernelBench-format file under `root` (recursively); ids are relative paths.

    Files that are not tasks (no Model/get_inputs/get_init_inputs) are listed in `skipped`.

    Raises:
        FileNotFoundError: `root` is not a directory.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"task directory not found: {root}")
    tasks, meta, skipped = [], {}, []
    for path in sorted(root.rglob(pattern)):
        task_id = path.relative_to(root).with_suffix("").as_posix()
        try:
            task = Task(task_id=task_id, source=path.read_text(), origin=str(path))
        except TaskFormatError as exc:
            skipped.append(f"{path}: {exc}")
            continue
        tasks.append(task)
        meta[task_id] = {"name": path.stem, "path": str(path)}
    if skipped:
        logger.warning("%d files under %s are not KernelBench-format tasks", len(skipped), root)
    return TaskSet(str(root), tasks, meta, skipped)


def load_kernelbench(root: str | Path, level: int | str) -> TaskSet:
    """One level of a local KernelBench checkout; ids "level1/19_ReLU" keep id and name.

    Args:
        root: The checkout (with `KernelBench/level1/...`) or its `KernelBench/` folder.
        level: 1-4, or "level1".."level4".
    """
    name = _level_name(level)
    root = Path(root)
    for base in (root / "KernelBench", root):
        folder = base / name
        if folder.is_dir():
            break
    else:
        raise FileNotFoundError(
            f"no {name}/ under {root} or {root / 'KernelBench'}; pass the KernelBench checkout"
        )
    tasks, meta, skipped = [], {}, []
    for path in sorted(folder.glob("*.py"), key=_problem_order):
        match = re.match(r"(\d+)_(.+)", path.stem)
        task_id = f"{name}/{path.stem}"
        try:
            task = Task(task_id=task_id, source=path.read_text(), origin=str(path))
        except TaskFormatError as exc:
            skipped.append(f"{path}: {exc}")
            continue
        tasks.append(task)
        meta[task_id] = {
            "level": int(name[5:]),
            "problem_id": int(match.group(1)) if match else None,
            "name": match.group(2) if match else path.stem,
            "path": str(path),
        }
    return TaskSet(f"kernelbench:{name}", tasks, meta, skipped)


def _level_name(level: int | str) -> str:
    text = str(level).lower().replace("_", "")
    text = text if text.startswith("level") else f"level{text}"
    if text not in ("level1", "level2", "level3", "level4"):
        raise ValueError(f"KernelBench level must be 1-4 or 'level1'..'level4', got {level!r}")
    return text


def _problem_order(path: Path) -> tuple[int, str]:
    match = re.match(r"(\d+)_", path.name)
    return (int(match.group(1)) if match else 10**9, path.name)


def load_task_parquet(path: str | Path, name: str | None = None) -> TaskSet:
    """Tasks from a parquet file: ours, KernelBench's (code/level/name/problem_id), or Ops-6K.

    The code column is `source`, `code` or another string column holding `class Model`; ids come
    from `task_id`, KernelBench's level and problem id, another id column, or the row number.
    Rows that are not KernelBench-format tasks are listed in `skipped`.
    """
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"parquet file not found: {path}")
    rows = pq.read_table(path).to_pylist()
    return tasks_from_rows(rows, name or str(path), origin=str(path))


def tasks_from_rows(rows: list[dict], name: str, origin: str) -> TaskSet:
    """Build a TaskSet from table rows (see `load_task_parquet` for the columns understood)."""
    if not rows:
        return TaskSet(name)
    code_col = _code_column(rows)
    tasks, meta, skipped = [], {}, []
    for i, row in enumerate(rows):
        task_id = _row_id(row, i)
        meta_row = {k: v for k, v in row.items() if k != code_col}
        if isinstance(meta_row.get("provenance"), str):
            try:
                meta_row["provenance"] = json.loads(meta_row["provenance"])
            except json.JSONDecodeError:
                pass
        try:
            task = Task(task_id=task_id, source=row[code_col] or "", origin=origin)
        except TaskFormatError as exc:
            skipped.append(f"row {i} ({task_id}): {exc}")
            continue
        if task_id in meta:
            skipped.append(f"row {i}: repeated id {task_id!r}")
            continue
        tasks.append(task)
        meta[task_id] = meta_row
    if skipped:
        logger.warning("%d rows of %s are not KernelBench-format tasks", len(skipped), name)
    return TaskSet(name, tasks, meta, skipped)


def _code_column(rows: list[dict]) -> str:
    columns = list(rows[0])
    for col in CODE_COLUMNS:
        if col in columns and isinstance(rows[0][col], str):
            return col
    for col in columns:
        sample = [r[col] for r in rows[:20] if isinstance(r.get(col), str)]
        if sample and any("class Model" in s for s in sample):
            return col
    raise DataUnavailableError(
        f"no column holding task code (class Model ...) among {columns}; expected one of "
        f"{CODE_COLUMNS}"
    )


def _row_id(row: dict, index: int) -> str:
    if row.get("task_id"):
        return str(row["task_id"])
    if row.get("level") is not None and row.get("problem_id") is not None:
        suffix = f"_{row['name']}" if row.get("name") else ""
        return f"level{row['level']}/{row['problem_id']}{suffix}"
    for col in ID_COLUMNS:
        if row.get(col) not in (None, ""):
            return str(row[col])
    return f"row{index:05d}"


def load_kernelbench_hf(level: int | str, cache_dir: str | Path | None = None) -> TaskSet:
    """One KernelBench level from Hugging Face (needs network access once; then cached).

    Raises:
        DataUnavailableError: Offline; the message says how to use a local checkout instead.
    """
    from cuda_gym.tasks.hub import hf_parquet_files

    name = _level_name(level)
    split = f"level_{name[5:]}"
    files = hf_parquet_files(
        KERNELBENCH_HF,
        split,
        cache_dir=cache_dir,
        offline_hint=(
            "clone https://github.com/ScalingIntelligence/KernelBench and use "
            "load_kernelbench(PATH, level)"
        ),
    )
    sets = [load_task_parquet(f, name=f"kernelbench-hf:{name}") for f in files]
    return _merge(f"kernelbench-hf:{name}", sets)


def load_ops6k(path: str | Path | None = None, cache_dir: str | Path | None = None) -> TaskSet:
    """The published CUDA-Agent-Ops-6K tasks, from a local parquet file or Hugging Face.

    Raises:
        DataUnavailableError: No path given and Hugging Face cannot be reached.
    """
    if path is not None:
        return load_task_parquet(path, name="ops6k")
    from cuda_gym.tasks.hub import hf_parquet_files

    files = hf_parquet_files(
        OPS6K_HF,
        "train",
        cache_dir=cache_dir,
        offline_hint=(
            f"download the parquet of https://huggingface.co/datasets/{OPS6K_HF} and pass "
            "its path: "
            "load_ops6k(PATH)"
        ),
    )
    return _merge("ops6k", [load_task_parquet(f, name="ops6k") for f in files])


def _generated_on(task: Task, task_set: TaskSet) -> str | None:
    """The device a synthesised task was sized and filtered on, from its provenance."""
    meta = task_set.meta.get(task.task_id) or {}
    return meta.get("device")


def _merge(name: str, sets: list[TaskSet]) -> TaskSet:
    tasks, meta, skipped = [], {}, []
    for s in sets:
        tasks += s.tasks
        meta.update(s.meta)
        skipped += s.skipped
    return TaskSet(name, tasks, meta, skipped)


def resolve_task_source(spec: str, device: str | None = None) -> TaskSet:
    """A TaskSet from an EnvConfig `task_source` value.

    "auto": the shipped synthesised set if present and sized for `device` (a set generated on
    the CPU is too small to time on a GPU), else the hand-written tasks; "builtin": the
    hand-written tasks; "synth" / "synth:train" / "synth:validation": the shipped set (or a
    split); "kernelbench:PATH:LEVEL"; or a path to a `.parquet` file or a directory of tasks.
    """
    if spec == "auto":
        if not builtin_set_available():
            return load_handwritten()
        shipped = load_builtin_set()
        if device == "cuda" and not any(_generated_on(t, shipped) == "cuda" for t in shipped.tasks):
            return load_handwritten()
        return shipped
    if spec == "builtin":
        return load_handwritten()
    if spec == "synth" or spec.startswith("synth:"):
        return load_builtin_set(spec.partition(":")[2] or None)
    if spec.startswith("kernelbench:"):
        path, _, level = spec[len("kernelbench:") :].rpartition(":")
        return load_kernelbench(path, level)
    path = Path(spec)
    if path.suffix == ".parquet":
        return load_task_parquet(path)
    if path.is_dir():
        return load_task_dir(path)
    raise DataUnavailableError(
        f"task source {spec!r} is neither 'auto', 'builtin', 'synth[:SPLIT]', "
        "'kernelbench:PATH:LEVEL', a .parquet file nor a directory"
    )


def load_task(spec: str | Path | Task) -> Task:
    """Load a task from a Task, a built-in id, a path to a `.py` file, or source text.

    Args:
        spec: A `Task` (returned as is), a built-in id: a hand-written task such as
            "row_softmax" or one of the shipped synthesised set such as "synth_0_02522", a path
            to a KernelBench-format file, or the source text itself (anything with a newline).

    Raises:
        UnknownTaskError: No such id; the message suggests close matches.
    """
    if isinstance(spec, Task):
        return spec
    text = str(spec)
    if "\n" in text:
        return task_from_string(text)
    if text.endswith(".py") or Path(text).is_file():
        return task_from_file(text)
    if text in builtin_task_ids():
        return builtin_task(text)
    shipped = load_builtin_set() if builtin_set_available() else None
    if shipped is not None and text in shipped:
        return shipped.get(text)
    ids = builtin_task_ids() + (shipped.ids() if shipped is not None else [])
    close = difflib.get_close_matches(text, ids, n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    searched = "the hand-written tasks" + (
        f" or the shipped synthesised set ({len(shipped)} tasks)" if shipped is not None else ""
    )
    raise UnknownTaskError(
        f"Unknown task {text!r}: not a file and not in {searched}.{hint} "
        "`cuda-gym tasks list --source all` lists them; tasks of a KernelBench checkout or a "
        "parquet file are found with --source."
    )
