"""Where code runs: child processes with timeouts that take their whole process group down."""

from cuda_gym.runtime.process import ProcessResult, python_child_env, run_process

__all__ = ["ProcessResult", "python_child_env", "run_process"]
