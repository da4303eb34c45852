"""Start and talk to the untrusted runner (cuda_gym.judge.runner) from the trusted driver.

`launch_untrusted` is the one place where a process that runs candidate code is started by the
driver: the OS sandbox (cuda_gym.runtime.sandbox) wraps it there. `RunnerLink` is
the driver's end of the socket: it sends requests, receives replies under the runner's time
budget, and turns a dead, hung or misbehaving runner into `RunnerFailed` (the candidate's
failure, never the judge's).
"""

from __future__ import annotations

import array
import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from cuda_gym.errors import SandboxError
from cuda_gym.judge.protocol import CallReply, ProtocolError, RunnerReady, decode
from cuda_gym.runtime.fork_server import FIRST_FD, ForkedProcess, ForkRefused, fork_process
from cuda_gym.runtime.process import die_with_parent
from cuda_gym.runtime.sandbox import (
    SandboxSpec,
    build_plan,
    failure_message,
    sandbox_argv,
    sandbox_env,
)

RUNNER_PATH = Path(__file__).with_name("runner.py")
MAX_MESSAGE_BYTES = 1 << 20
SOCKET_BUFFER_BYTES = 4 << 20
LOG_TAIL_CHARS = 1500
# The kernel stamps each message the runner sends with the moment of its send (SO_TIMESTAMPNS,
# CLOCK_REALTIME; Linux's value, which Python 3.11's socket module does not name): the driver
# learns when the runner said "done" however late it is scheduled to read it.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_STAMP_SPACE = socket.CMSG_SPACE(16)


# One string hash in every candidate process: an extension named after hash(source) must get
# the same name in the build stage and in the runner.
CANDIDATE_HASH_SEED = "0"


def runner_command(*args: str) -> list[str]:
    """The command line of runner.py with `args`, to run with `runner_env_for`'s environment.

    Isolated as `python -I` would be, but for the environment: -I ignores PYTHONHASHSEED. So
    `-s -P` (Python 3.11+; -I before, and a hash-named extension then fails), with the
    environment the judge builds stripped of Python's other variables.
    """
    if sys.version_info < (3, 11):
        return [sys.executable, "-I", str(RUNNER_PATH), *args]
    return [sys.executable, "-s", "-P", str(RUNNER_PATH), *args]


def runner_python_flags() -> list[str]:
    """The interpreter flags of `runner_command` (a fork server of runners starts with them)."""
    return runner_command()[1:-1]


def runner_env_for(env: dict[str, str]) -> dict[str, str]:
    """`env` for runner.py: none of Python's own variables (PYTHONPATH...) but the hash seed."""
    return {
        **{k: v for k, v in env.items() if not k.startswith("PYTHON")},
        "PYTHONHASHSEED": CANDIDATE_HASH_SEED,
    }


def fork_untrusted(
    address: str,
    work_dir: Path,
    env: dict[str, str],
    sock_fd: int,
    sandbox: SandboxSpec | None,
    log_fd: int,
) -> ForkedProcess:
    """Start runner.py (serving `sock_fd`) through the fork server at `address`.

    As `launch_untrusted`, from a process that has imported torch already
    (cuda_gym.runtime.fork_server). Raises ForkRefused if the server did not start it.
    """
    plan = None
    if sandbox is not None:
        env = sandbox_env(env, sandbox)
        plan = build_plan(sandbox, env, work_dir)
    return fork_process(
        address,
        RUNNER_PATH,
        [str(FIRST_FD)],
        cwd=work_dir,
        env=env,
        fds=(sock_fd, log_fd),
        sandbox=plan,
    )


class RunnerFailed(Exception):
    """The runner crashed, ran out of time, or broke the protocol: the candidate's failure."""


def runner_sandbox(
    scratch: Path,
    device: str,
    readable: tuple[str, ...],
    data_bytes: int | None,
    budget_s: float,
    keep: tuple[str, ...] = (),
) -> SandboxSpec:
    """The OS sandbox of one runner: a private copy of `scratch` its only writable directory.

    It reads the solution, the built extension and the driver's init file (`readable`); it
    writes nothing of the driver's: the driver's own files (its result, its stage) are outside
    its view, and of what it writes only the `keep` names of its scratch come back. CPU time:
    every core busy for the whole budget.
    """
    return SandboxSpec(
        scratch=scratch,
        keep=keep,
        device=device,
        readable=readable,
        data_bytes=data_bytes,
        cpu_s=budget_s * (os.cpu_count() or 1) + 60,
    )


def open_log(path: Path) -> int:
    """A new log file for an untrusted process (read and write): a descriptor.

    Never through a link left there, and read back through this descriptor only: a process
    that replaces its log with a link to another file cannot have the judge read that file.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(path, flags, 0o600)


def log_tail(fd: int, chars: int) -> str:
    """The last `chars` characters (about) of the log open as `fd`, stripped."""
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, 4 * chars, max(0, size - 4 * chars))
    except OSError:
        return ""
    return data.decode(errors="replace").strip()[-chars:]


def launch_untrusted(
    argv: list[str],
    work_dir: Path,
    env: dict[str, str],
    pass_fds: tuple[int, ...],
    sandbox: SandboxSpec | None,
    log_fd: int,
) -> subprocess.Popen:
    """Start a process that runs candidate code, in its own session, logging to `log_fd`.

    With a `sandbox` spec, the command confines itself first (cuda_gym.runtime.sandbox:
    namespaces, a read-only view of the machine, seccomp, rlimits); without one it runs as the
    judge's user (the development mode that every verdict flags as `unsandboxed`).
    """
    if sandbox is not None:
        env = sandbox_env(env, sandbox)
        argv = sandbox_argv(argv, build_plan(sandbox, env, work_dir))
    return subprocess.Popen(
        argv,
        cwd=work_dir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log_fd,
        stderr=subprocess.STDOUT,
        pass_fds=pass_fds,
        start_new_session=True,
        # Its own session: without this a runner whose driver was killed would run on.
        preexec_fn=die_with_parent,
    )


class RunnerLink:
    """The driver's end of one runner: requests out, strictly decoded replies back.

    Args:
        work_dir: The runner's working directory (its log goes there).
        env: The runner's environment.
        budget_s: Seconds the runner may spend answering, all requests together.
        role: Who runs in it, for messages ("candidate", "eager baseline", ...).
        sandbox: The runner's OS sandbox (`runner_sandbox`), or None (unsandboxed).
        spin_s: Seconds each side polls for the other's next message before it sleeps (on the
            GPU, where a timed call is a millisecond or less, a sleeping process's wake-up would
            count in it); 0: never poll.
        fork_server: The address of a fork server of runners (cuda_gym.runtime.fork_server) to
            start the runner from; if it does not serve, the runner starts afresh
            (`fork_failure` says why).
    """

    log_fd: int | None = None  # the runner's log, open since before it started

    def __init__(
        self,
        work_dir: Path,
        env: dict[str, str],
        budget_s: float,
        role: str,
        sandbox: SandboxSpec | None,
        spin_s: float = 0.0,
        fork_server: str | None = None,
    ) -> None:
        self.work_dir = work_dir
        self.spin_s = spin_s
        self.budget_s = budget_s
        self.spent_s = 0.0
        self.role = role
        self.stage = "load"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for sock in (ours, theirs):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
        self.sock = ours
        try:
            ours.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            pass  # no stamps: a message's time is when the driver read it
        # CLOCK_MONOTONIC ns: when the last message received was sent, and a call's "done"
        # (`timed_call`; None where the call said none)
        self.stamp_ns = 0
        self.done_ns: int | None = None
        argv = runner_command(str(theirs.fileno()))
        env = runner_env_for(env)
        self.log_fd = open_log(work_dir / "runner.log")
        self.forked = False  # started by the fork server (runner.py's imports done before)
        self.fork_failure: str | None = None
        try:
            if fork_server is not None:
                try:
                    self.proc = fork_untrusted(
                        fork_server, work_dir, env, theirs.fileno(), sandbox, self.log_fd
                    )
                    self.forked = True
                except ForkRefused as exc:
                    self.fork_failure = str(exc)
            if not self.forked:
                self.proc = launch_untrusted(
                    argv, work_dir, env, (theirs.fileno(),), sandbox, self.log_fd
                )
        except BaseException:
            os.close(self.log_fd)
            raise
        finally:
            theirs.close()

    # -- messages -------------------------------------------------------------------------------

    def send(self, message: dict, fds: tuple[int, ...] = ()) -> None:
        """Send one message (with file descriptors, for the CPU's call buffers)."""
        self._send(self._encode(message), fds)

    def _encode(self, message: dict) -> bytes:
        if self.spin_s:
            message = {**message, "spin_s": self.spin_s}
        return json.dumps(message).encode()

    def _send(self, data: bytes, fds: tuple[int, ...]) -> None:
        try:
            if fds:
                rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                self.sock.sendmsg([data], rights)
            else:
                self.sock.sendall(data)
        except OSError as exc:
            raise self._failed(f"stopped listening ({exc.strerror})") from None

    def receive(self, limit_s: float | None = None) -> dict:
        """The next reply as a dict, within `limit_s` and what is left of the budget."""
        left = self.budget_s - self.spent_s
        if left <= 0:
            raise self._timed_out()
        per_request = limit_s is not None and limit_s < left
        start = time.monotonic()
        data = self._poll(min(self.spin_s, limit_s if per_request else left))
        self.sock.settimeout(limit_s if per_request else left)
        try:
            if data is None:
                data = self._recv()
        except TimeoutError:
            self.spent_s += time.monotonic() - start
            raise self._timed_out(limit_s if per_request else None) from None
        except OSError as exc:
            raise self._failed(f"broke its connection ({exc.strerror})") from None
        self.spent_s += time.monotonic() - start
        if not data:
            raise self._failed(None)
        try:
            return json.loads(data)
        except (ValueError, RecursionError, MemoryError):  # nested ten thousand deep, say
            raise self._failed("sent something that is not a message") from None

    def _poll(self, spin_s: float) -> bytes | None:
        """The next message if it comes within `spin_s` (polled, never slept for), else None."""
        if spin_s <= 0:
            return None
        deadline = time.perf_counter() + spin_s
        self.sock.setblocking(False)
        try:
            while time.perf_counter() < deadline:
                try:
                    return self._recv()
                except BlockingIOError:
                    pass
                except OSError:
                    return None  # the blocking receive reports it
        finally:
            self.sock.setblocking(True)
        return None

    def _recv(self) -> bytes:
        """One message; `stamp_ns` is set to when it was sent (its receipt if unstamped)."""
        data, ancillary, _, _ = self.sock.recvmsg(MAX_MESSAGE_BYTES, _STAMP_SPACE)
        now = time.monotonic_ns()
        self.stamp_ns = now
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                seconds, nanoseconds = struct.unpack_from("qq", value)
                before = time.monotonic_ns()  # (the two clocks read as close together as can be)
                offset = time.clock_gettime_ns(time.CLOCK_REALTIME)
                offset -= (before + time.monotonic_ns()) // 2
                # (never later than its receipt: a clock set back in between)
                self.stamp_ns = min(now, seconds * 1_000_000_000 + nanoseconds - offset)
        return data

    def wait_started(self, limit_s: float | None = None) -> None:
        """Wait until the runner has imported torch (host work, before any device work)."""
        if self.receive(limit_s) != {"started": True}:
            raise self._failed("sent a malformed reply (expected its start)")

    def start(self, init: dict, limit_s: float | None = None) -> RunnerReady:
        """Send the RunnerInit (a dict); the runner's RunnerReady (within `limit_s`)."""
        self.send(init)
        return self._decode(RunnerReady, self.receive(limit_s))

    def prime(self, limit_s: float | None = None) -> None:
        """CUDA: have the runner run one tiny kernel and wait for it (before a timed call).

        The device then runs the runner's context when the call is sent: its switch from the
        driver's (whose flush ran last) is not inside the call's window.
        """
        self._refuse_unasked()
        self.send({"kind": "prime"})
        if self.receive(limit_s) != {"primed": True}:
            raise self._failed("sent a malformed reply (expected its prime)")

    def call(
        self, message: dict, fds: tuple[int, ...] = (), limit_s: float | None = None
    ) -> CallReply:
        """One CallRequest (a dict) and its CallReply (within `limit_s`)."""
        return self.timed_call(message, fds, limit_s)[0]

    def timed_call(
        self, message: dict, fds: tuple[int, ...] = (), limit_s: float | None = None
    ) -> tuple[CallReply, float, float]:
        """One CallRequest: (its CallReply, seconds until "done", seconds from "done" on).

        A call whose forward returned is answered "done" first (right after forward and the
        runner's synchronisation), then with its CallReply; a failed one, or any other kind,
        with the CallReply alone (its "done" time is then the reply's). `done_ns`: when the
        runner sent its "done" (the kernel's stamp, CLOCK_MONOTONIC), None without one.
        """
        # "done" must repeat this call's nonce, which the runner learns only from the call: a
        # "done" sent ahead (queued before the call, to stop the clock before the work) cannot.
        nonce = secrets.randbits(62)
        data = self._encode({**message, "nonce": nonce})
        self._refuse_unasked()
        self.done_ns = None
        sent_ns = time.monotonic_ns()
        start = self.sent_at = time.perf_counter()
        self._send(data, fds)
        data = self.receive(limit_s)
        done = time.perf_counter()
        if isinstance(data, dict) and data.get("done") is True:
            if data != {"call_id": message["call_id"], "done": True, "nonce": nonce}:
                raise self._failed('sent a "done" that is not this call\'s')
            self.done_ns = max(sent_ns, self.stamp_ns)
            data = self.receive(limit_s)
        end = time.perf_counter()
        reply = self._decode(CallReply, data)
        if reply.call_id != message["call_id"]:
            raise self._failed("answered another call than the one asked")
        return reply, done - start, end - done

    def _refuse_unasked(self) -> None:
        """Fail if the runner sent anything since its last reply (nothing was asked of it)."""
        timeout = self.sock.gettimeout()
        self.sock.setblocking(False)  # with a timeout, recv would wait for data first
        try:
            waiting = self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return  # a broken connection: the send or receive that follows reports it
        finally:
            self.sock.settimeout(timeout)
        if waiting:
            raise self._failed("sent a message nobody asked for")

    def _decode(self, cls, data):
        try:
            return decode(cls, data)
        except ProtocolError as exc:
            raise self._failed(f"sent a malformed reply ({exc})") from None

    # -- endings --------------------------------------------------------------------------------

    def close(self) -> None:
        """Ask the runner to exit, then make sure its whole session is gone."""
        try:
            self.sock.sendall(json.dumps({"kind": "exit"}).encode())
        except OSError:
            pass
        self.sock.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        self._kill()
        if self.log_fd is not None:
            os.close(self.log_fd)
            self.log_fd = None

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _timed_out(self, limit_s: float | None = None) -> RunnerFailed:
        self._kill()
        if limit_s is not None:
            what = "loading" if self.stage == "load" else "one call"
            return RunnerFailed(
                f"The {self.role} process timed out: {what} took longer than its limit of "
                f"{limit_s:.1f} s during stage '{self.stage}' (a call's limit follows the "
                f"reference's time on the same inputs).{self._log_tail()}"
            )
        return RunnerFailed(
            f"The {self.role} process timed out after {self.budget_s:.0f} s during stage "
            f"'{self.stage}'.{self._log_tail()}"
        )

    def _failed(self, how: str | None) -> RunnerFailed:
        if how is None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            refused = failure_message(code, self._log_tail()) if code is not None else None
            if refused:  # the sandbox could not be set up: the machine's fault, not the code's
                self._kill()
                raise SandboxError(refused)
            if code is None:
                how = "closed its connection"
            elif code < 0:
                how = f"was killed by {signal.Signals(-code).name}"
            else:
                how = f"ended with exit status {code}"
        self._kill()
        return RunnerFailed(
            f"The {self.role} process {how} during stage '{self.stage}'.{self._log_tail()}"
        )

    def _log_tail(self) -> str:
        tail = log_tail(self.log_fd, LOG_TAIL_CHARS) if self.log_fd is not None else ""
        return "\n" + tail if tail else ""
