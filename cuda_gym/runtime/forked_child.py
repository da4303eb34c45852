"""What a child forked from a warm server does before it runs its program (zygote, fork server).

A process started by fork, not exec, keeps the server's Python state; these steps make it look
like a process started afresh: its own session, default signal handlers, Python's streams on the
new descriptors 0-2, the request's working directory and environment, and, when the request
carries a sandbox plan, the same confinement an exec'd process gets (cuda_gym.runtime.confine),
dumpable afterwards as an exec after the change of user would have left it.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping


def detach() -> None:
    """Own session and process group (killed as one), signal handlers back to their defaults."""
    os.setsid()
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def adopt_streams() -> None:
    """Python's stdin, stdout and stderr on descriptors 0, 1 and 2 (set up by the caller)."""
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own streams
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115


def settle(cwd: str, env: Mapping[str, str], sandbox: dict | None) -> None:
    """Take the working directory and environment; confine by `sandbox` if given.

    A refused confinement ends the process as the sandbox's own start does (its failure marker
    on stderr, its exit code), so the caller tells a sandbox failure from the program's own.
    """
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if not sandbox:
        return
    from cuda_gym.runtime import confine

    try:
        confine.confine(sandbox)
        confine.make_dumpable()
    except confine.SetupError as exc:
        sys.stderr.write(f"{confine.FAILURE_MARKER} {exc}\n")
        sys.stderr.flush()
        os._exit(confine.FAILURE_EXIT)


def run_as_main(run: Callable[..., object], *args: object, **kwargs: object) -> int:
    """Call `run(*args, **kwargs)` (a runpy call); the exit code a normal interpreter gives."""
    try:
        run(*args, **kwargs)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # report like an uncaught exception in a normal interpreter
        import traceback

        traceback.print_exc()
        return 1
    return 0


def exit_now(code: int) -> None:
    """Flush Python's streams and leave without running the server's exit handlers."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
