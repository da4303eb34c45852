"""Start worker processes fast: fork them from a warm process that has already imported torch.

A judge worker spends seconds importing torch and the modules PyTorch loads the first time a
dispatch mode is entered, before it does any work. The zygote is a long-lived child that pays
this once: it imports those modules (never touching the GPU: no CUDA context exists in it) and
then forks one process per request. Each forked worker is a fresh process as far as the
candidate can tell: its own session and process group, its own working directory, environment
and standard streams, nothing shared with the judge but copy-on-write pages of imported code.
CUDA is initialised in the forked child, never in the zygote, so forking is safe; NVML, which
PyTorch may initialise without CUDA, is shut down in the zygote before it forks.

`ZygoteLauncher.run` has the contract of `run_process` (timeouts kill the whole process group,
output is bounded, a ProcessResult is returned) and falls back to `run_process` whenever the
zygote cannot serve (not started, died, refused), so a broken zygote costs speed, never results.

A request may carry a sandbox plan (cuda_gym.runtime.sandbox): the forked worker then confines
itself before it runs the module, and the fallback start runs it through `sandbox_argv`.

Protocol (JSON lines): the client writes requests {"id", "module", "args", "cwd", "env",
"stdin", "stdout", "stderr", "sandbox"} to the zygote's standard input; the zygote answers
{"id", "pid"} once forked and {"exit": pid, "code": returncode} when it has reaped a child.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from cuda_gym.runtime import forked_child
from cuda_gym.runtime.process import (
    DEFAULT_MAX_OUTPUT_CHARS,
    PAUSE_POLL_S,
    Pause,
    ProcessResult,
    _kill_group,
    _read_bounded,
    run_process,
)

logger = logging.getLogger(__name__)

READY = "zygote-ready"
# Why zygotes of this process could not serve (start-up failures, disable() calls), oldest first:
# a benchmark of fast worker start reports them, so a run that fell back is not mistaken for one.
_failures: list[str] = []
START_TIMEOUT_S = 120.0
FORK_REPLY_TIMEOUT_S = 30.0
POLL_S = 0.02


# -- the zygote process -------------------------------------------------------------------------


def driver_initialised() -> bool:
    """Whether this process has initialised the CUDA driver (cuInit), without initialising it.

    A driver initialised before fork() is unusable in the forked children: their first CUDA
    call fails. cuCtxGetCurrent answers CUDA_ERROR_NOT_INITIALIZED (3) until cuInit has run and
    does not run it; a driver library that is not even loaded has not been initialised.
    """
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)
    except OSError:
        return False
    context = ctypes.c_void_p()
    return lib.cuCtxGetCurrent(ctypes.byref(context)) == 0


def shut_nvml_down() -> int:
    """Undo every NVML initialisation of this process, without loading NVML; return how many.

    NVML's state does not survive fork(): a child of a process that has NVML initialised cannot
    initialise it itself. PyTorch initialises NVML to count devices without starting CUDA (so a
    preload may well have), and asserts on it when it reports an out-of-memory error, so such a
    child turns every out-of-memory error into an internal assertion. NVML counts its
    initialisations; each nvmlShutdown undoes one and the last frees its state.
    """
    import ctypes

    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1", mode=os.RTLD_NOLOAD)
    except OSError:
        return 0
    undone = 0
    while undone < 10_000 and lib.nvmlShutdown() == 0:  # NVML_ERROR_UNINITIALIZED (1) at the end
        undone += 1
    return undone


def _serve(preload: str | None) -> None:
    """Zygote main loop: fork a worker per request line, report pids and exit codes."""
    if preload:
        module, _, func = preload.partition(":")
        getattr(__import__(module, fromlist=[func]), func)()
    if driver_initialised():
        # Refuse rather than fork children whose CUDA cannot start: the client then starts
        # its workers the slow way (this message reaches its log).
        sys.stderr.write(f"zygote refuses to serve: the preload {preload!r} initialised CUDA\n")
        sys.exit(3)
    undone = shut_nvml_down()
    if undone:
        sys.stderr.write(f"zygote: shut NVML down ({undone} initialisation(s) by the preload)\n")
    out = sys.stdout
    out.write(READY + "\n")
    out.flush()
    children: set[int] = set()
    buffer = b""
    stdin_fd = sys.stdin.fileno()
    try:
        while True:
            ready, _, _ = select.select([stdin_fd], [], [], POLL_S)
            if ready:
                chunk = os.read(stdin_fd, 65536)
                if not chunk:
                    return  # the client is gone
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    request = json.loads(line)
                    pid = _fork_worker(request)
                    children.add(pid)
                    out.write(json.dumps({"id": request["id"], "pid": pid}) + "\n")
                    out.flush()
            for pid in list(children):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    children.discard(pid)
                    code = os.waitstatus_to_exitcode(status)
                    out.write(json.dumps({"exit": pid, "code": code}) + "\n")
                    out.flush()
    finally:
        for pid in children:
            _kill_group(pid)


def _fork_worker(request: dict) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        forked_child.detach()
        for fd, path, flags in (
            (0, request["stdin"], os.O_RDONLY),
            (1, request["stdout"], os.O_WRONLY | os.O_TRUNC),
            (2, request["stderr"], os.O_WRONLY | os.O_TRUNC),
        ):
            target = os.open(path, flags)
            os.dup2(target, fd)
            os.close(target)
        os.closerange(3, 65536)
        forked_child.adopt_streams()
        forked_child.settle(request["cwd"], request["env"], request.get("sandbox"))
        import runpy

        sys.argv = [request["module"], *request["args"]]
        code = forked_child.run_as_main(
            runpy.run_module, request["module"], run_name="__main__", alter_sys=True
        )
    finally:
        forked_child.exit_now(code)


# -- the client -----------------------------------------------------------------------------------


class ZygoteLauncher:
    """Runs `python -m MODULE ARGS` processes forked from a warm zygote (thread-safe)."""

    def __init__(self, env: Mapping[str, str], preload: str | None = None) -> None:
        self.env = dict(env)
        self.preload = preload
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._proc: subprocess.Popen | None = None
        self._ids = itertools.count()
        self._pids: dict[int, int] = {}
        self._exits: dict[int, int] = {}
        self._broken = False
        self._log = None

    # life cycle

    def _start(self) -> bool:
        """Start the zygote if needed (lock held); False when it cannot serve."""
        if self._proc is not None and self._proc.poll() is None:
            return True
        if self._broken:
            return False
        self._log = tempfile.TemporaryFile()
        args = [sys.executable, "-m", "cuda_gym.runtime.zygote"]
        if self.preload:
            args.append(self.preload)
        try:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                # A preload that asks whether CUDA is available asks NVML, not the driver (which
                # would be initialised, and unusable after fork). Children get their own env.
                env={"PYTORCH_NVML_BASED_CUDA_CHECK": "1", **self.env},
                start_new_session=True,
            )
        except OSError as exc:
            self._give_up(f"could not start: {exc}")
            return False
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
        if line != READY:
            _kill_group(proc.pid)
            proc.wait()
            self._log.seek(0)
            self._give_up("failed to start:\n" + self._log.read().decode(errors="replace")[-2000:])
            return False
        self._proc = proc
        self._pids.clear()
        self._exits.clear()
        threading.Thread(target=self._read_replies, args=(proc,), daemon=True).start()
        return True

    def _read_replies(self, proc: subprocess.Popen) -> None:
        for raw in proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            with self._cond:
                if "pid" in msg:
                    self._pids[msg["id"]] = msg["pid"]
                elif "exit" in msg:
                    self._exits[msg["exit"]] = msg["code"]
                self._cond.notify_all()
        with self._cond:  # EOF: the zygote died; wake every waiter
            if self._proc is proc:
                self._proc = None
            self._cond.notify_all()

    def _give_up(self, why: str) -> None:
        """Serve no more (lock held): log and record why; `run` then starts processes afresh."""
        if not self._broken:
            self._broken = True
            logger.warning("zygote %s; workers start the slow way", why)
            _failures.append(why)

    def disable(self, reason: str) -> None:
        """Stop the zygote for good: from now on `run` starts every process the slow way."""
        with self._lock:
            self._give_up(f"disabled: {reason[:2000]}")
        self.close()

    def close(self) -> None:
        """Stop the zygote (its running children's process groups are killed)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()

    # running

    def run(
        self,
        module: str,
        args: Sequence[str],
        *,
        timeout_s: float,
        cwd: str | os.PathLike,
        env: Mapping[str, str],
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        stdin_data: bytes | None = None,
        pause: Pause | None = None,
        sandbox: dict | None = None,
    ) -> ProcessResult:
        """Like `run_process([python, -m, module, *args], ...)`, forked from the zygote.

        With `sandbox` (a plan from cuda_gym.runtime.sandbox.build_plan) the worker runs
        confined, forked or not.
        """
        with tempfile.TemporaryDirectory(prefix="cuda_gym_zygote_") as tmp:
            paths = {name: Path(tmp, name) for name in ("stdin", "stdout", "stderr")}
            paths["stdin"].write_bytes(stdin_data or b"")
            paths["stdout"].touch()
            paths["stderr"].touch()
            request = {
                "module": module,
                "args": list(args),
                "cwd": str(cwd),
                "env": dict(env),
                "sandbox": sandbox,
                **{k: str(v) for k, v in paths.items()},
            }
            start = time.monotonic()
            pid = self._fork(request)
            if pid is None:
                argv = [sys.executable, "-m", module, *args]
                if sandbox:
                    from cuda_gym.runtime.sandbox import sandbox_argv

                    argv = sandbox_argv(argv, sandbox)
                return run_process(
                    argv,
                    timeout_s=timeout_s,
                    cwd=cwd,
                    env=env,
                    max_output_chars=max_output_chars,
                    stdin_data=stdin_data,
                    pause=pause,
                )
            returncode, timed_out = self._wait(pid, start + timeout_s, pause)
            duration_s = time.monotonic() - start
            with open(paths["stdout"], "rb") as out, open(paths["stderr"], "rb") as err:
                return ProcessResult(
                    returncode=returncode,
                    stdout=_read_bounded(out, max_output_chars),
                    stderr=_read_bounded(err, max_output_chars),
                    timed_out=timed_out,
                    duration_s=duration_s,
                )

    def _fork(self, request: dict) -> int | None:
        with self._cond:
            if not self._start():
                return None
            request["id"] = next(self._ids)
            try:
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
            except (OSError, ValueError):
                return None
            deadline = time.monotonic() + FORK_REPLY_TIMEOUT_S
            while request["id"] not in self._pids:
                left = deadline - time.monotonic()
                if self._proc is None or left <= 0:
                    return None
                self._cond.wait(left)
            return self._pids.pop(request["id"])

    def _wait(self, pid: int, deadline: float, pause: Pause | None = None) -> tuple[int, bool]:
        """Wait for the exit of `pid`; kill its process group at the deadline.

        The deadline moves back while `pause` is active (see runtime.process.Pause).
        """
        timed_out = False
        last = time.monotonic()
        with self._cond:
            while pid not in self._exits:
                if self._proc is None:  # the zygote died and cannot reap: kill and give up
                    _kill_group(pid)
                    return -signal.SIGKILL, timed_out
                now = time.monotonic()
                if pause is not None and not timed_out:
                    deadline += pause.extension(now - last)
                last = now
                left = deadline - now
                if left <= 0 and not timed_out:
                    timed_out = True
                    _kill_group(pid)
                if timed_out:
                    self._cond.wait(1.0)
                elif pause is not None:
                    self._cond.wait(min(max(left, 0.01), PAUSE_POLL_S))
                else:
                    self._cond.wait(max(left, 0.5))
            code = self._exits.pop(pid)
        # Reap anything the worker left behind in its group (ninja jobs, spawned helpers).
        _kill_group(pid)
        return code, timed_out


_shared: dict[tuple, ZygoteLauncher] = {}
_shared_lock = threading.Lock()


def shared_launcher(env: Mapping[str, str], preload: str | None = None) -> ZygoteLauncher:
    """One launcher per (environment, preload) in this process, shared by every judge."""
    key = (tuple(sorted(env.items())), preload)
    with _shared_lock:
        launcher = _shared.get(key)
        if launcher is None:
            launcher = _shared[key] = ZygoteLauncher(env, preload)
        return launcher


def zygote_failures() -> list[str]:
    """Why zygotes of this process could not serve, oldest first (empty: every one served)."""
    return list(_failures)


def close_shared_launchers() -> None:
    """Stop every shared zygote of this process (they restart on the next use)."""
    with _shared_lock:
        launchers = list(_shared.values())
        _shared.clear()
    for launcher in launchers:
        launcher.close()


if __name__ == "__main__":
    _serve(sys.argv[1] if len(sys.argv) > 1 else None)
