"""Task format and task sources: KernelBench-style problems in, `Task` out."""

from cuda_gym.tasks.task import (
    Task,
    builtin_task,
    builtin_task_ids,
    load_task,
    task_from_file,
    task_from_string,
)

__all__ = [
    "Task",
    "builtin_task",
    "builtin_task_ids",
    "load_task",
    "task_from_file",
    "task_from_string",
]
