"""Write a run's tasks: one parquet file, or a directory of KernelBench files plus the parquet.

Parquet columns: task_id, name, split, source, device, chain_length, ops (list), families
(list), eager_ms, compile_ms, provenance (JSON text). `cuda_gym.tasks.load_task_parquet` reads
them back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        ("task_id", pa.string()),
        ("name", pa.string()),
        ("split", pa.string()),
        ("source", pa.string()),
        ("device", pa.string()),
        ("chain_length", pa.int32()),
        ("ops", pa.list_(pa.string())),
        ("families", pa.list_(pa.string())),
        ("eager_ms", pa.float64()),
        ("compile_ms", pa.float64()),
        ("provenance", pa.string()),
    ]
)


def write_parquet(tasks: list[dict], path: str | Path) -> Path:
    """Write tasks (as made by `pipeline.task_record`) to one parquet file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = {name: [] for name in SCHEMA.names}
    for task in tasks:
        for name in SCHEMA.names:
            value = task.get(name)
            if name == "provenance":
                value = json.dumps(value, sort_keys=True, default=str)
            columns[name].append(value)
    table = pa.table(columns, schema=SCHEMA)
    pq.write_table(table, path, compression="zstd")
    return path


def write_output(tasks: list[dict], summary: dict, out: str | Path) -> Path:
    """Write to `out`: a `.parquet` file, or a directory (tasks/*.py, tasks.parquet, summary).

    Returns:
        The parquet file written.
    """
    out = Path(out)
    if out.suffix == ".parquet":
        path = write_parquet(tasks, out)
        out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=2, default=str))
        return path
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; give a DIR or a .parquet")
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    for task in tasks:
        (out / "tasks" / f"{task['task_id']}.py").write_text(task["source"])
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return write_parquet(tasks, out / "tasks.parquet")
