"""Start untrusted runners fast: fork them from a warm process that has imported torch.

A runner started afresh (`python -s -P runner.py FD`) spends seconds importing torch before it
serves its first call: 4.7 s of CPU on an H100 host (benchmarks/results/process_cpu_h100.json),
about half of what a candidate's runner costs the host in a judgement. The fork server pays that
once. It is a trusted process of the judge's that imports torch (never CUDA: forked children start
it) and nothing of the judge's, and listens on a Unix socket in a directory only the judge's
user can enter. A driver connects and sends one request (JSON) with the runner's descriptors
(its end of the driver's socket pair, its log); the server forks, and the child:

- makes its own session (the driver kills its process group as it kills a runner it started),
- takes /dev/null as stdin, the log as stdout and stderr, the socket as descriptor 3, and
  closes every other descriptor (the server's socket and other drivers' connections),
- takes the request's working directory and environment,
- confines itself by the request's sandbox plan (cuda_gym.runtime.confine, as a runner started
  afresh does before its exec),
- forgets the server's modules (`cuda_gym.*` leave sys.modules) and runs the requested script
  as `__main__` from the top of the stack: nothing of the server is reachable from its frames.

The server answers `{"pid"}` and, once it has reaped the child, `{"exit": code}`; a driver whose
connection closes (it died) takes its runner with it. The child shares nothing with the server
but copy-on-write pages: the server's memory holds other requests' paths at most, never a
judgement's data (drivers keep those).

`fork_process` is the driver's side; it raises `ForkRefused` when the server cannot serve, and
the driver then starts the runner afresh.
"""

from __future__ import annotations

import array
import contextlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from cuda_gym.runtime import forked_child

logger = logging.getLogger(__name__)

READY = "fork-server-ready"
START_TIMEOUT_S = 120.0
REPLY_TIMEOUT_S = 30.0
MAX_REQUEST_BYTES = 1 << 20
MAX_FDS = 4
# The descriptor the child finds the request's first descriptor at (the runner's socket).
FIRST_FD = 3
# What every runner imports first: torch (the seconds saved) and what it imports lazily.
PRELOAD_MODULES = ("torch", "torch.utils.cpp_extension", "torch.utils._python_dispatch")


class ForkRefused(OSError):
    """The fork server could not start a process (not running, refused, broke down)."""


# -- the server -----------------------------------------------------------------------------------


class _Child(BaseException):
    """Raised in a freshly forked child to unwind the server's frames before it runs."""

    def __init__(self, request: dict, fds: list[int]) -> None:
        super().__init__()
        self.request = request
        self.fds = fds


def _preload() -> None:
    import importlib

    from cuda_gym.runtime.zygote import driver_initialised, shut_nvml_down

    for name in PRELOAD_MODULES:
        importlib.import_module(name)
    if driver_initialised():
        sys.stderr.write("fork server refuses to serve: importing torch initialised CUDA\n")
        sys.exit(3)
    shut_nvml_down()


def serve(address: str) -> None:
    """The server's loop: one forked child per connection; ends when stdin closes."""
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(128)
    sys.stdout.write(READY + "\n")
    sys.stdout.flush()
    waiting: dict[int, socket.socket] = {}  # connections without a child yet, by descriptor
    children: dict[int, socket.socket] = {}  # pid -> its driver's connection
    stdin_fd = sys.stdin.fileno()
    uid = os.geteuid()
    try:
        while True:
            talking = [c.fileno() for c in children.values()]
            watched = [stdin_fd, listener.fileno(), *waiting, *talking]
            ready, _, _ = select.select(watched, [], [], 0.05)
            if stdin_fd in ready and not os.read(stdin_fd, 4096):
                return  # the judge is gone
            if listener.fileno() in ready:
                conn, _ = listener.accept()
                if _peer_uid(conn) != uid:  # only the judge's own processes
                    conn.close()
                else:
                    waiting[conn.fileno()] = conn
            for fd in [fd for fd in ready if fd in waiting]:
                conn = waiting.pop(fd)
                pid = _fork_for(conn, listener, waiting, children)
                if pid is not None:
                    children[pid] = conn
            for pid, conn in list(children.items()):
                if conn.fileno() in ready and _closed(conn):  # the driver left: so does its child
                    _kill_group(pid)
            _reap(children)
    finally:
        for pid in children:
            _kill_group(pid)


def _fork_for(conn, listener, waiting, children) -> int | None:
    """Read `conn`'s request and fork its child; the pid, or None (the connection closed)."""
    try:
        data, fds = _receive(conn)
        request = json.loads(data)
    except (OSError, ValueError) as exc:
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"error": f"bad request: {exc}"}).encode() + b"\n")
        conn.close()
        return None
    pid = os.fork()
    if pid == 0:
        listener.close()
        for other in [*waiting.values(), *children.values()]:
            other.close()
        waiting.clear()
        children.clear()  # (the server's, not this child's, to kill on the way out)
        conn.close()
        raise _Child(request, fds)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:
        _kill_group(pid)
    return pid


def _receive(conn: socket.socket) -> tuple[bytes, list[int]]:
    """One request: JSON bytes up to a newline, and the descriptors sent with its first part."""
    fds: list[int] = []
    data = b""
    conn.settimeout(REPLY_TIMEOUT_S)
    while not data.endswith(b"\n"):
        chunk, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(MAX_FDS * 4))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                got = array.array("i")
                got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
                fds.extend(got)
        if not chunk:
            raise OSError("the connection closed before its request ended")
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise OSError("request too large")
    conn.settimeout(None)
    return data, fds


def _closed(conn: socket.socket) -> bool:
    """Whether readable `conn` was closed by its driver.

    A driver sends nothing after its request: anything else it sends is dropped.
    """
    try:
        return not conn.recv(4096, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        _kill_group(pid)  # what it left in its session
        if conn is not None:
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
            conn.close()


def _peer_uid(conn: socket.socket) -> int | None:
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    except OSError:
        return None
    return int.from_bytes(creds[4:8], sys.byteorder)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _become(request: dict, fds: list[int]) -> None:
    """In the forked child: take the request's streams, directory and environment, confine."""
    forked_child.detach()
    high = [os.dup(fd) for fd in fds]  # out of the way of 0-3 first
    for fd in high:
        os.set_inheritable(fd, True)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    if len(high) > 1:  # the log
        os.dup2(high[1], 1)
        os.dup2(high[1], 2)
    if high:
        os.dup2(high[0], FIRST_FD)
    os.closerange(FIRST_FD + 1 if high else FIRST_FD, 1 << 16)
    forked_child.adopt_streams()
    forked_child.settle(request["cwd"], request["env"], request.get("sandbox"))


def _run(request: dict) -> int:
    """Run the request's script as __main__ with its arguments; the exit code."""
    import gc
    import runpy

    for name in [n for n in sys.modules if n == "cuda_gym" or n.startswith("cuda_gym.")]:
        del sys.modules[name]
    gc.collect()
    sys.argv = [request["path"], *request["args"]]
    return forked_child.run_as_main(runpy.run_path, request["path"], run_name="__main__")


def main() -> None:
    """`python -m cuda_gym.runtime.fork_server ADDRESS` (the judge starts it: ForkServer)."""
    try:
        serve(sys.argv[1])
    except _Child as child:
        request, fds = child.request, child.fds
    else:
        return
    # Here the server's frames are gone (the exception and its traceback with them).
    code = 1
    try:
        _become(request, fds)
        code = _run(request)
    finally:
        forked_child.exit_now(code)


# -- the judge's side -----------------------------------------------------------------------------


# A forked child's first work, before the server is used: torch computes, and on "cuda" starts
# CUDA in the fork (a server whose children cannot is not used: runners then start afresh).
PROBE = """
import sys
import torch
assert float(torch.ones(4).sum()) == 4.0
if sys.argv[1] == "cuda":
    x = torch.ones(4, device="cuda")
    assert float(x.sum()) == 4.0
"""
PROBE_TIMEOUT_S = 120.0


class ForkServer:
    """The judge's handle on one fork server: started on first use, stopped by `close`.

    Args:
        env: The server's environment (a runner's: its hash seed, no PYTHON* variables).
        python_flags: The interpreter's flags, as a runner started afresh gets them.
        device: "cuda" or "cpu": what the server's first forked child (PROBE) must use.
    """

    def __init__(
        self, env: Mapping[str, str], python_flags: Sequence[str] = (), device: str = "cpu"
    ) -> None:
        self.env = dict(env)
        self.python_flags = list(python_flags)
        self.device = device
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._dir: tempfile.TemporaryDirectory | None = None
        self.failure: str | None = None

    def address(self) -> str | None:
        """The server's socket path (started if needed), or None if it cannot serve."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return str(Path(self._dir.name, "socket"))
            if self.failure is not None:
                return None
            address = self._start()
            if address is None:
                logger.warning("the fork server of runners %s: they start afresh", self.failure)
            return address

    def _start(self) -> str | None:
        self._dir = tempfile.TemporaryDirectory(prefix="cuda_gym_forks_")
        os.chmod(self._dir.name, 0o700)
        address = str(Path(self._dir.name, "socket"))
        log = tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen(
                [sys.executable, *self.python_flags, "-m", "cuda_gym.runtime.fork_server", address],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env={"PYTORCH_NVML_BASED_CUDA_CHECK": "1", **self.env},
                start_new_session=True,
            )
        except OSError as exc:
            self.failure = f"could not start: {exc}"
            return None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
        if line != READY:
            _kill_group(proc.pid)
            proc.wait()
            log.seek(0)
            self.failure = "failed to start:\n" + log.read().decode(errors="replace")[-2000:]
            return None
        self._proc = proc
        why = self._probe(address)
        if why is not None:
            self._stop()
            self.failure = f"is not used ({why})"
            return None
        return address

    def _probe(self, address: str) -> str | None:
        """Fork PROBE; None if it ran, else why the server is not to be used."""
        script = Path(self._dir.name, "probe.py")
        script.write_text(PROBE)
        null = os.open(os.devnull, os.O_RDONLY)
        with tempfile.TemporaryFile() as log:
            try:
                proc = fork_process(
                    address,
                    script,
                    [self.device],
                    cwd=self._dir.name,
                    env=self.env,
                    fds=(null, log.fileno()),
                )
                code = proc.wait(PROBE_TIMEOUT_S)
            except (ForkRefused, subprocess.TimeoutExpired) as exc:
                return f"its first child did not run: {exc}"
            finally:
                os.close(null)
            if code != 0:
                log.seek(0)
                tail = log.read().decode(errors="replace")[-2000:]
                return f"its first child ({self.device}) failed with status {code}:\n{tail}"
        return None

    def close(self) -> None:
        """Stop the server (it kills the children it still has)."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


_shared: dict[tuple, ForkServer] = {}
_shared_lock = threading.Lock()


def shared_fork_server(
    env: Mapping[str, str], python_flags: Sequence[str] = (), device: str = "cpu"
) -> ForkServer:
    """One fork server per (environment, flags, device) in this process, shared by judges."""
    key = (tuple(sorted(env.items())), tuple(python_flags), device)
    with _shared_lock:
        server = _shared.get(key)
        if server is None:
            server = _shared[key] = ForkServer(env, python_flags, device)
        return server


def close_shared_fork_servers() -> None:
    """Stop every shared fork server of this process (they restart on the next use)."""
    with _shared_lock:
        servers = list(_shared.values())
        _shared.clear()
    for server in servers:
        server.close()


class ForkedProcess:
    """A process the fork server started for this one: the part of Popen a driver uses.

    Its exit status comes from the server, which reaped it; if the server dies first, the
    process's group is killed and the status is -SIGKILL.
    """

    def __init__(self, conn: socket.socket, pid: int, pending: bytes) -> None:
        self.conn = conn
        self.pid = pid
        self.returncode: int | None = None
        self._pending = pending

    def poll(self) -> int | None:
        """The exit status, or None while it runs."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.wait(0)
        return None

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; subprocess.TimeoutExpired if it has not ended within `timeout`."""
        if self.returncode is not None:
            return self.returncode
        self.conn.settimeout(timeout)
        while b"\n" not in self._pending:
            try:
                chunk = self.conn.recv(4096)
            except (TimeoutError, BlockingIOError):
                raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout) from None
            except OSError:
                chunk = b""
            if not chunk:  # the server is gone without a status: make sure the process is too
                _kill_group(self.pid)
                self._close(-signal.SIGKILL)
                return self.returncode
            self._pending += chunk
        line = self._pending.split(b"\n", 1)[0]
        try:
            code = int(json.loads(line)["exit"])
        except (ValueError, KeyError, TypeError):
            code = -signal.SIGKILL
        self._close(code)
        return code

    def _close(self, code: int) -> None:
        self.returncode = code
        self.conn.close()


def fork_process(
    address: str,
    path: str | os.PathLike,
    args: Sequence[str],
    *,
    cwd: str | os.PathLike,
    env: Mapping[str, str],
    fds: Sequence[int] = (),
    sandbox: dict | None = None,
) -> ForkedProcess:
    """Start the script `path` with `args` through the fork server at `address`.

    `fds` reach the child as descriptors 3 (the first) and 1 and 2 (the second, its log);
    `args` name the first as "3" (FIRST_FD). Raises ForkRefused if the server did not fork it.
    """
    if len(fds) > MAX_FDS:
        raise ValueError(f"at most {MAX_FDS} descriptors")
    request = {
        "path": str(path),
        "args": list(args),
        "cwd": str(cwd),
        "env": dict(env),
        "sandbox": sandbox,
    }
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(REPLY_TIMEOUT_S)
        conn.connect(address)
        data = json.dumps(request).encode() + b"\n"
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        sent = conn.sendmsg([data], rights)
        if sent < len(data):
            conn.sendall(data[sent:])
        pending = b""
        while b"\n" not in pending:
            chunk = conn.recv(4096)
            if not chunk:
                raise ForkRefused("the fork server closed the connection")
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        reply = json.loads(line)
        if "pid" not in reply:
            raise ForkRefused(f"the fork server refused: {reply.get('error')}")
    except (OSError, ValueError) as exc:
        conn.close()
        if isinstance(exc, ForkRefused):
            raise
        raise ForkRefused(f"the fork server could not be asked: {exc}") from exc
    return ForkedProcess(conn, int(reply["pid"]), pending)


if __name__ == "__main__":
    main()
