"""DeviceGate: while a judge worker times on a device, no other judge worker uses that device.

Judge workers of every process on a machine (envs, the KernelBench harness's processes, the
local service, other users' runs) take the gate of their device: shared while they run
correctness trials or compute reference outputs, alone while they time or profile. So several
judgements can share one GPU for everything but their timing, and timing still sees an idle GPU.

The gate is three flock(2) locks on files named after the device (a GPU's UUID; "cpu" for the
host):

- `main`: shared holders work; one exclusive holder times.
- `turn`: taken briefly by everyone entering, and held by a process waiting to time, so that
  new shared holders queue behind a waiting timer instead of starving it.
- `timers`: held shared by every process waiting to time or timing; a shared holder entering
  first waits until nobody holds it. So the timers queued while the device drains of shared
  work then time one after another, and shared work comes back once for all of them: a drain
  (waiting for the longest shared holder) is paid once per batch of timers, not once per timer.
  Timers only come from processes already let in (a timer goes back to waiting like any shared
  entrant), so a batch is finite and shared entrants are not starved. A shared holder working
  in short steps steps out between them while timers wait (`make_way`), so a drain lasts one
  step of the longest holder's, not its whole shared work.

A process never holds `main` while it waits for `turn` or `timers`, so nobody can deadlock. The
kernel drops a dead holder's locks, so a killed worker never leaves the gate closed. The files
are in /dev/shm/cuda_gym_gates (or under the temporary directory); CUDA_GYM_GATE_DIR overrides
it.

For diagnosis, CUDA_GYM_GATE_TRACE names a file where every gate of every process started with
it appends its transitions and its holder's stages (`DeviceGate.note`; benchmarks/gate_trace.py
reads them): what share of the time the device is held alone, drained, or idle with someone
waiting, and whose steps the drains wait for.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PREFIX = "cuda_gym_gate_"
GATES_SUBDIR = "cuda_gym_gates"
TRACE_ENV = "CUDA_GYM_GATE_TRACE"


def gate_dir() -> Path:
    """CUDA_GYM_GATE_DIR, else `cuda_gym_gates/` in /dev/shm when writable or in the temp dir.

    A directory of their own, so that a sandboxed worker (cuda_gym.runtime.sandbox) can be given
    the gates and nothing else of /dev/shm. It is world-writable with the sticky bit, like /tmp:
    any user's workers meet there, and none can remove a gate file another user created.
    """
    override = os.environ.get("CUDA_GYM_GATE_DIR")
    if override:
        return Path(override)
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    directory = base / GATES_SUBDIR
    if not directory.is_dir():
        directory.mkdir(exist_ok=True)
        with contextlib.suppress(PermissionError):  # another user made it
            directory.chmod(0o1777)
    return directory


class DeviceGate:
    """The gate of one device, for this process (not thread-safe: one per worker process).

    Args:
        name: The device's identity, e.g. "cuda-GPU-5f1c..." or "cpu".
        directory: Where the lock files live (default: `gate_dir()`).

    Attributes:
        waited_s: Seconds this process has waited for the gate so far.
    """

    def __init__(self, name: str, directory: Path | None = None) -> None:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120]
        directory = directory or gate_dir()
        directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        # Read-only is enough for flock, so any user can take a gate another user created.
        flags = os.O_RDONLY | os.O_CREAT
        self._main = os.open(directory / f"{PREFIX}{safe}.main", flags, 0o666)
        self._turn = os.open(directory / f"{PREFIX}{safe}.turn", flags, 0o666)
        self._timers = os.open(directory / f"{PREFIX}{safe}.timers", flags, 0o666)
        self._held: str | None = None  # None, "shared" or "exclusive"
        self.waited_s = 0.0
        trace = os.environ.get(TRACE_ENV)
        self._trace = None
        if trace:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            self._trace = os.open(trace, flags, 0o600)

    def note(self, event: str, detail: str = "") -> None:
        """Append `<monotonic s> <pid> <event> <detail>` to the trace file, if tracing.

        Events: want_shared, shared, want_exclusive, exclusive, out (main released), and
        stage (the holder's work, `detail`). One write of one short line: lines of several
        processes never interleave (O_APPEND).
        """
        if self._trace is None:
            return
        line = f"{time.monotonic():.6f} {os.getpid()} {event} {detail}".rstrip() + "\n"
        with contextlib.suppress(OSError):  # a diagnosis must not fail a judgement
            os.write(self._trace, line.encode())

    def _flock(self, fd: int, op: int) -> None:
        start = time.monotonic()
        fcntl.flock(fd, op)
        self.waited_s += time.monotonic() - start

    def _enter(self, op: int, held: str) -> None:
        """Take `main` with `op`, queueing through `timers` and `turn` (see the module doc)."""
        self.note(f"want_{held}")
        if op == fcntl.LOCK_SH:
            try:
                self._flock(self._timers, fcntl.LOCK_EX)  # behind every waiting or timing timer
            finally:
                fcntl.flock(self._timers, fcntl.LOCK_UN)  # (unlocking what is not held: no-op)
        try:
            if op == fcntl.LOCK_EX:
                self._flock(self._timers, fcntl.LOCK_SH)
            self._flock(self._turn, fcntl.LOCK_EX)
            try:
                self._flock(self._main, op)
            finally:
                fcntl.flock(self._turn, fcntl.LOCK_UN)
        except BaseException:
            if op == fcntl.LOCK_EX:
                fcntl.flock(self._timers, fcntl.LOCK_UN)
            raise
        self._held = held
        self.note(held)

    def _leave(self) -> None:
        fcntl.flock(self._main, fcntl.LOCK_UN)
        if self._held == "exclusive":
            fcntl.flock(self._timers, fcntl.LOCK_UN)
        self._held = None
        self.note("out")

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Use the device alongside other shared holders (not while anyone times)."""
        if self._held is not None:
            yield  # already inside the gate
            return
        self._enter(fcntl.LOCK_SH, "shared")
        try:
            yield
        finally:
            self._leave()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Use the device alone; a shared hold of this process is given up meanwhile."""
        before = self._held
        if before == "exclusive":
            yield
            return
        if before == "shared":
            self._leave()  # never hold `main` while waiting for `turn`
        self._enter(fcntl.LOCK_EX, "exclusive")
        try:
            yield
        finally:
            self._leave()
            if before == "shared":
                self._enter(fcntl.LOCK_SH, "shared")

    @contextlib.contextmanager
    def outside(self) -> Iterator[None]:
        """Give up a shared hold for a block of host-only work, then take it back.

        For seconds of CPU work inside a worker's device work (attaching the profiler): a timer
        waiting for the device need not wait for it. Taking the hold back queues like any
        shared entry. An exclusive hold is kept (its holder is timing).
        """
        if self._held != "shared":
            yield
            return
        self._leave()
        try:
            yield
        finally:
            self._enter(fcntl.LOCK_SH, "shared")

    def timers_waiting(self) -> bool:
        """Whether any process waits to time or is timing (holds `timers`)."""
        if self._held == "exclusive":
            return True  # this process (converting its own hold of `timers` would drop it)
        try:
            fcntl.flock(self._timers, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._timers, fcntl.LOCK_UN)
        return False

    def make_way(self) -> bool:
        """Between two steps of shared work: step out for waiting timers, then back in.

        A timer waits for every shared holder to leave (the drain). A holder whose shared work
        is many short steps (a judgement's correctness calls) calls this between them, so the
        drain lasts one step, not all of them; it comes back behind the timers queued now, as
        any shared entrant would. Returns whether it stepped out.
        """
        if self._held != "shared" or not self.timers_waiting():
            return False
        self._leave()
        self._enter(fcntl.LOCK_SH, "shared")
        return True

    @property
    def held(self) -> str | None:
        """The hold of this process: "shared", "exclusive" or None."""
        return self._held

    def close(self) -> None:
        """Release whatever is held and close the files."""
        if self._held is not None:
            self._leave()
        os.close(self._main)
        os.close(self._turn)
        os.close(self._timers)
        if self._trace is not None:
            os.close(self._trace)
            self._trace = None


def device_identity(device: str) -> str:
    """The gate name of the device this process uses: its GPU's UUID, or "cpu".

    A UUID, not an index: processes that see the GPUs in another order or through another
    CUDA_VISIBLE_DEVICES still meet at the same gate. (On CUDA this initialises the runtime.)
    """
    if device != "cuda":
        return "cpu"
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        return f"cuda-{uuid}"
    return f"cuda-{props.name}-{getattr(props, 'pci_bus_id', 0)}"


class MemoryLedger:
    """Device memory reserved by the judge workers of every process on the machine.

    The gate keeps timings apart; this keeps memory from running out when many judgements of
    large tasks share a GPU. A worker waits until its estimate fits beside what others hold.
    One JSON file per device next to the gate's files, `{"held": {pid: bytes}, "base": {pid:
    bytes}, "waiting": [[pid, bytes], ...]}`, changed under its flock; entries of dead
    processes are dropped by whoever reads them, so a killed worker frees its share. Only the
    oldest waiter may take a reservation (a large one is not starved by small ones).

    A worker may hold its whole estimate only while it works on the device and keep a `base`
    (its CUDA contexts and models) between steps (`shrink`; `grow` takes the rest back). One
    larger than what is free waits until no other process holds more than its base, then
    takes it anyway: every other holder is then between steps, using little.

    Args:
        name: The device's identity (as for DeviceGate).
        capacity: Bytes the judges of this machine may reserve together.
        directory: Where the ledger lives (default: `gate_dir()`).
    """

    POLL_S = 0.1

    def __init__(self, name: str, capacity: int, directory: Path | None = None) -> None:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120]
        directory = directory or gate_dir()
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{PREFIX}{safe}.memory"
        self.capacity = capacity
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        with contextlib.suppress(PermissionError):
            os.fchmod(self._fd, 0o666)
        self.held = 0
        self.base: int | None = None  # kept between device steps (`set_base`)
        self.waited_s = 0.0

    def _update(self, change) -> bool:
        """Apply `change(state) -> bool` to the ledger under its lock; its answer."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            os.lseek(self._fd, 0, os.SEEK_SET)
            raw = os.read(self._fd, 1 << 20)
            try:
                state = json.loads(raw) if raw.strip() else {}
            except ValueError:
                state = {}
            held = {p: int(b) for p, b in (state.get("held") or {}).items() if _alive(int(p))}
            base = {p: int(b) for p, b in (state.get("base") or {}).items() if p in held}
            waiting = [[int(p), int(b)] for p, b in state.get("waiting") or [] if _alive(int(p))]
            state = {"held": held, "base": base, "waiting": waiting}
            answer = change(state)
            data = json.dumps(state).encode()
            os.lseek(self._fd, 0, os.SEEK_SET)
            os.ftruncate(self._fd, 0)
            os.write(self._fd, data)
            return answer
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _take(self, nbytes: int, queue: bool):
        """A change taking `nbytes` more for this process if they fit, in turn (see the doc)."""
        pid = os.getpid()

        def take(state: dict) -> bool:
            held, base, waiting = state["held"], state["base"], state["waiting"]
            queued = any(p == pid for p, _ in waiting)
            if queue and not queued:
                waiting.append([pid, nbytes])
            first = (waiting[0][0] == pid) if waiting else True
            if not queue and waiting and not queued:
                return False  # others wait: a try does not pass them
            used = sum(held.values())
            others_working = any(b > base.get(p, 0) for p, b in held.items() if p != str(pid))
            fits = used + nbytes <= self.capacity or not others_working
            if first and fits:
                waiting[:] = [w for w in waiting if w[0] != pid]
                held[str(pid)] = held.get(str(pid), 0) + nbytes
                return True
            return False

        return take

    def reserve(self, nbytes: int) -> None:
        """Wait until `nbytes` more fit (in turn), then hold them until released or exit."""
        nbytes = max(0, int(nbytes))
        start = time.monotonic()
        while not self._update(self._take(nbytes, queue=True)):
            time.sleep(self.POLL_S)
        self.held += nbytes
        self.waited_s += time.monotonic() - start

    def try_reserve(self, nbytes: int) -> bool:
        """Take `nbytes` more now if they fit and nobody waits; whether it did."""
        nbytes = max(0, int(nbytes))
        if not self._update(self._take(nbytes, queue=False)):
            return False
        self.held += nbytes
        return True

    def set_base(self, nbytes: int) -> None:
        """What this process keeps between its device steps (at most what it holds)."""
        pid = str(os.getpid())
        nbytes = max(0, min(int(nbytes), self.held))

        def put(state: dict) -> bool:
            if pid in state["held"]:
                state["base"][pid] = nbytes
            return True

        self._update(put)
        self.base = nbytes

    def shrink(self) -> int:
        """Keep only the base; the bytes given back (take them again with `reserve`)."""
        pid = str(os.getpid())
        base = self.base
        if base is None or self.held <= base:
            return 0

        def drop(state: dict) -> bool:
            if pid in state["held"]:
                state["held"][pid] = base
            return True

        self._update(drop)
        given, self.held = self.held - base, base
        return given

    def release(self) -> None:
        """Give back what this process holds."""
        pid = str(os.getpid())

        def drop(state: dict) -> bool:
            state["held"].pop(pid, None)
            state["base"].pop(pid, None)
            return True

        self._update(drop)
        self.held = 0
        self.base = None

    def close(self) -> None:
        """Release and close the ledger file."""
        if self.held:
            self.release()
        os.close(self._fd)


def _alive(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie holds no memory)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc: ask the kernel
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process
            return True
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
