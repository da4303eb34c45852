"""Run a command in its own process group with a timeout, capturing bounded output.

Every compile, verification and profiling step runs through `run_process`, so a kernel that
segfaults or spins forever costs one child process, never the env. On timeout, and after every
normal exit, the whole process group is killed, which also reaps grandchildren (ninja, nvcc, or
anything the candidate spawned).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)

DEFAULT_MAX_OUTPUT_CHARS = 200_000
# How often a child with a pausable clock is checked.
PAUSE_POLL_S = 0.2


@dataclass
class Pause:
    """Stops a child's clock while `active()` is true, for at most `max_s` seconds in all.

    The judge pauses a worker's clock while it waits for its device's gate (another process
    is timing there): the wait is not the worker's doing. The bound keeps a child that only
    claims to wait (the flag is its stage file) from running forever.
    """

    active: Callable[[], bool]
    max_s: float
    used_s: float = 0.0

    def extension(self, elapsed_s: float) -> float:
        """Seconds to add to the deadline for `elapsed_s` just spent (0 when not paused)."""
        if self.used_s >= self.max_s or elapsed_s <= 0 or not self.active():
            return 0.0
        step = min(elapsed_s, self.max_s - self.used_s)
        self.used_s += step
        return step


def wait_pausable(proc: subprocess.Popen, deadline: float, pause: Pause | None) -> int:
    """`proc.wait()` until `deadline` (monotonic), pushed back while `pause` is active.

    Raises:
        subprocess.TimeoutExpired: The (extended) deadline passed.
    """
    if pause is None:
        return proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    last = time.monotonic()
    while True:
        try:
            return proc.wait(timeout=max(0.0, min(PAUSE_POLL_S, deadline - last)))
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            deadline += pause.extension(now - last)
            last = now
            if now >= deadline:
                raise


@dataclass(frozen=True)
class ProcessResult:
    """What a child process did.

    Attributes:
        returncode: Exit status; negative for death by signal (e.g. -11 for SIGSEGV).
        stdout: Captured standard output (head and tail kept if it was longer than the limit).
        stderr: Captured standard error, bounded the same way.
        timed_out: True when the process was killed for running past its timeout.
        duration_s: Wall-clock seconds from start to exit or kill.
    """

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float

    @property
    def ok(self) -> bool:
        """True for a zero exit status without a timeout."""
        return self.returncode == 0 and not self.timed_out

    @property
    def signal_name(self) -> str | None:
        """Name of the signal that killed the process (e.g. "SIGSEGV"), if any."""
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def describe_failure(self, timeout_s: float | None = None) -> str:
        """One line saying how the process failed (timeout, signal, or exit status)."""
        if self.timed_out:
            limit = f" of {timeout_s:g} s" if timeout_s else ""
            return f"timed out: killed after exceeding the time limit{limit}"
        if self.signal_name:
            return f"crashed: the process was killed by {self.signal_name}"
        return f"failed with exit status {self.returncode}"


def _read_bounded(handle, max_chars: int) -> str:
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(0)
    if size <= max_chars:
        return handle.read().decode("utf-8", errors="replace")
    half = max_chars // 2
    head = handle.read(half).decode("utf-8", errors="replace")
    handle.seek(size - half)
    tail = handle.read(half).decode("utf-8", errors="replace")
    return f"{head}\n[... {size - 2 * half} bytes of output cut ...]\n{tail}"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_process(
    argv: Sequence[str],
    *,
    timeout_s: float,
    cwd: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    stdin_data: bytes | None = None,
    pause: Pause | None = None,
    nice: int = 0,
) -> ProcessResult:
    """Run `argv` in a new session and wait at most `timeout_s` seconds.

    Output goes to temporary files (no pipe can fill up and block the child), and at most
    `max_output_chars` characters of each stream are kept.

    Args:
        argv: Program and arguments.
        timeout_s: Wall-clock limit; past it the whole process group gets SIGKILL.
        cwd: Working directory of the child.
        env: Full environment of the child (defaults to this process's environment).
        max_output_chars: Bound on each captured stream.
        stdin_data: Bytes written to the child's standard input (keep it small: a request).
        pause: Stops the clock while the child waits for something outside its control.
        nice: Niceness added to the child's (and so to everything it starts): compilers run
            at a lower priority than the processes that time or serve calls (`niced`).

    Returns:
        The ProcessResult; this function does not raise for failures of the child.
    """
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryFile() as inp,
    ):
        if stdin_data is not None:
            inp.write(stdin_data)
            inp.seek(0)
        start = time.monotonic()
        proc = subprocess.Popen(
            niced(argv, nice),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=inp if stdin_data is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        timed_out = False
        try:
            returncode = wait_pausable(proc, start + timeout_s, pause)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            returncode = proc.wait()
        except BaseException:
            _kill_group(proc.pid)
            proc.wait()
            raise
        finally:
            # Reap anything the child left behind in its group (ninja jobs, spawned helpers).
            _kill_group(proc.pid)
        duration_s = time.monotonic() - start
        if timed_out:
            logger.info("killed %s after %.1f s", argv[0], duration_s)
        return ProcessResult(
            returncode=returncode,
            stdout=_read_bounded(out, max_output_chars),
            stderr=_read_bounded(err, max_output_chars),
            timed_out=timed_out,
            duration_s=duration_s,
        )


def niced(argv: Sequence[str], nice: int) -> list[str]:
    """`argv` run at niceness +`nice`, its session's scheduling group too (as it is for 0).

    run_process starts every child in a session of its own, and where the kernel groups tasks
    by session (autogroup, `/proc/sys/kernel/sched_autogroup_enabled`) the CPU is shared
    between the groups first: a task's own niceness then only orders it within its group. So
    the child also lowers its group (`/proc/self/autogroup`; refused harmlessly where there is
    none, or to a user changing one more often than the kernel allows). Through sh(1) and
    nice(1), not `preexec_fn`: the judge starts children from many threads, where
    `preexec_fn` is not safe. Priority is a courtesy to the rest of the host (a build beside a
    timing loop), never a limit: without nice(1) the child runs as it is, and that is logged.
    """
    if nice <= 0:
        return list(argv)
    tool, shell = _nice_program(), shutil.which("sh")
    if tool is None or shell is None:
        logger.debug("no nice(1) or sh(1) on PATH: %s runs at the judge's priority", argv[0])
        return list(argv)
    level = str(int(nice))
    script = f'echo {level} > /proc/self/autogroup 2>/dev/null; exec "$0" -n {level} "$@"'
    return [shell, "-c", script, tool, *argv]


def _nice_program() -> str | None:
    return shutil.which("nice")


def die_with_parent() -> None:
    """SIGKILL this process when the one that started it ends (Linux; a no-op elsewhere).

    For judge workers: their parent holds their time limits, so a worker whose judge died (a
    one-shot CLI that returned while baselines were still being timed, a killed trainer) would
    otherwise run on unbounded, holding a GPU's memory and its gate. (A parent that ends in the
    moment between this process's start and this call is not seen: no parent pid is checked,
    since a judge may itself be pid 1 and a sandboxed worker's parent is its sandbox.)
    """
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def python_child_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """An environment in which `python -m cuda_gym...` works, even when cuda_gym is not installed.

    Args:
        base: Starting environment (defaults to os.environ).
        **extra: Variables to set on top.
    """
    env = dict(os.environ if base is None else base)
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [package_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(extra)
    return env
