"""Task format and task sources: KernelBench-style problems in, `Task` out."""

from cuda_gym.tasks.collection import TaskSet
from cuda_gym.tasks.sources import (
    builtin_set_available,
    load_builtin_set,
    load_handwritten,
    load_kernelbench,
    load_kernelbench_hf,
    load_ops6k,
    load_task,
    load_task_dir,
    load_task_parquet,
    resolve_task_source,
)
from cuda_gym.tasks.task import (
    Task,
    builtin_task,
    builtin_task_ids,
    task_from_file,
    task_from_string,
)

__all__ = [
    "Task",
    "TaskSet",
    "builtin_set_available",
    "builtin_task",
    "builtin_task_ids",
    "load_builtin_set",
    "load_handwritten",
    "load_kernelbench",
    "load_kernelbench_hf",
    "load_ops6k",
    "load_task",
    "load_task_dir",
    "load_task_parquet",
    "resolve_task_source",
    "task_from_file",
    "task_from_string",
]
