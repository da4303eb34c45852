"""The error vocabulary of cuda_gym: misuse of the API and infrastructure failures.

A failing kernel (compile error, wrong output, crash, hang) is never an exception: it is a
`Verdict` and an observation. These errors are for callers who misuse the API, and for the
machinery under the env (a worker or GPU lost) failing.
"""

from __future__ import annotations


class CudaGymError(Exception):
    """Base class of every error raised by cuda_gym."""


class ConfigError(CudaGymError, ValueError):
    """A configuration value is invalid; the message names the fix."""


class TaskFormatError(CudaGymError, ValueError):
    """A task source is not in KernelBench format (Model, get_inputs, get_init_inputs)."""


class UnknownTaskError(CudaGymError, KeyError):
    """No task with the requested id exists in the task source."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown task"


class EnvStateError(CudaGymError, RuntimeError):
    """An env method was called in the wrong state (e.g. step() before reset())."""


class DeviceUnavailableError(CudaGymError, RuntimeError):
    """The requested device (e.g. "cuda") is not available on this machine."""


class WorkerError(CudaGymError, RuntimeError):
    """A judge worker failed for reasons that are not the candidate's fault."""


class SandboxError(CudaGymError, RuntimeError):
    """The OS refused to set up the sandbox for candidate code; says which mechanism and what to do.

    Raised before any candidate code runs, so it is never the candidate's fault.
    """


class DataUnavailableError(CudaGymError, RuntimeError):
    """A task set cannot be obtained (offline, missing file, unexpected layout); says what to do."""


def is_out_of_memory(error: BaseException | str) -> bool:
    """Whether an error, or its text (a worker's traceback), is running out of memory."""
    if isinstance(error, BaseException) and any(
        cls.__name__ == "OutOfMemoryError" for cls in type(error).__mro__
    ):
        return True
    text = str(error).lower()
    return "out of memory" in text or "outofmemoryerror" in text
