"""Where the filters run: a small job-pool interface and its local process implementation.

`JobPool` is all the pipeline needs (submit, next_result, pending, close), so another backend
(the shared execution service, Ray) can replace `LocalProcessPool` without touching the pipeline.
The local pool keeps long-lived worker processes (torch is imported once per worker), gives each
job a deadline, and replaces a worker that dies or runs past it: a hung or crashing task costs
one worker restart and comes back as an error result. Workers that share a device time under one
lock per device, so a device is never timed while another worker times on it.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing as mp
import os
import time
import traceback
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Protocol

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobResult:
    """The outcome of one job.

    Attributes:
        key: The key it was submitted with.
        ok: The function returned (False: it raised, the worker died, or the deadline passed).
        value: The function's return value when ok.
        error: What went wrong otherwise.
    """

    key: Any
    ok: bool
    value: Any = None
    error: str = ""


class JobPool(Protocol):
    """Runs `function(payload, lock)` jobs somewhere and hands back their results."""

    def submit(self, key: Any, payload: Any) -> None:
        """Queue a job."""

    def next_result(self) -> JobResult:
        """Block until some job finishes; return its result."""

    @property
    def pending(self) -> int:
        """Jobs submitted and not yet returned by next_result."""

    def close(self) -> None:
        """Stop every worker (running jobs are abandoned)."""


def _resolve(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


_FREE, _SHARED, _WAITING, _EXCLUSIVE = 0, 1, 2, 3


class DeviceLock:
    """The locks of one device, shared by the pool's workers on it.

    Used as a context manager it is the timing lock (one worker times at a time). `shared()` and
    `exclusive()` form a gate around whole jobs: any number of shared holders, or one exclusive
    holder and nobody else (a job that ran out of memory runs again alone, with no other
    worker's tensors on the device). The gate's state is one entry per worker, so the pool
    frees the entry of a worker it kills (`reset`) and nothing leaks.
    """

    def __init__(self, ctx, workers: int) -> None:
        self._timing = ctx.Lock()
        self._cond = ctx.Condition()
        self._state = ctx.Array("b", workers, lock=False)
        self.index: int | None = None

    def bind(self, index: int) -> DeviceLock:
        """This process is worker `index` (called in the worker)."""
        self.index = index
        return self

    def __enter__(self):
        self._timing.acquire()
        return self

    def __exit__(self, *exc) -> bool:
        self._timing.release()
        return False

    def _set(self, value: int) -> None:
        self._state[self.index] = value
        self._cond.notify_all()

    def _others(self) -> list[tuple[int, int]]:
        return [(j, v) for j, v in enumerate(self._state) if j != self.index and v != _FREE]

    @contextlib.contextmanager
    def shared(self):
        """Hold the gate with other shared holders; wait while anyone waits for it alone."""
        with self._cond:
            self._cond.wait_for(lambda: all(v == _SHARED for _, v in self._others()))
            self._set(_SHARED)
        try:
            yield
        finally:
            with self._cond:
                self._set(_FREE)

    @contextlib.contextmanager
    def exclusive(self):
        """Hold the gate alone (waiters queue by worker index)."""
        with self._cond:
            self._set(_WAITING)
            self._cond.wait_for(
                lambda: all(v == _WAITING and j > self.index for j, v in self._others())
            )
            self._set(_EXCLUSIVE)
        try:
            yield
        finally:
            with self._cond:
                self._set(_FREE)

    def reset(self, index: int) -> None:
        """Free a (killed) worker's entry (called in the pool)."""
        with self._cond:
            self._state[index] = _FREE
            self._cond.notify_all()


def _worker_main(conn, target: str, lock, env: dict[str, str], index: int = 0) -> None:
    os.environ.update(env)
    if isinstance(lock, DeviceLock):
        lock.bind(index)
    function = _resolve(target)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        key, payload = job
        try:
            conn.send((key, True, function(payload, lock), ""))
        except Exception:  # reported to the parent as this job's error
            conn.send((key, False, None, traceback.format_exc()[-3000:]))


class _Worker:
    def __init__(self, ctx, target: str, lock, env: dict[str, str], index: int) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, target, lock, env, index))
        self.process.daemon = True
        self.process.start()
        child.close()
        self.job: Any = None
        self.deadline = 0.0


class LocalProcessPool:
    """Worker processes on this machine, started with `spawn` (safe with CUDA).

    Args:
        target: "module:function" called as function(payload, lock) in the workers.
        workers: Number of processes.
        timeout_s: Deadline of one job.
        env: Extra environment variables of every worker (e.g. inductor settings).
        per_worker_env: Optional extra variables per worker index (e.g. CUDA_VISIBLE_DEVICES).
    """

    def __init__(
        self,
        target: str,
        workers: int,
        timeout_s: float,
        env: dict[str, str] | None = None,
        per_worker_env: list[dict[str, str]] | None = None,
    ) -> None:
        self._ctx = mp.get_context("spawn")
        self._target = target
        self._timeout_s = timeout_s
        self._env = dict(env or {})
        self._per_worker = per_worker_env or [{}] * workers
        # One timing lock per device: workers with the same extra environment (the same
        # CUDA_VISIBLE_DEVICES) share a lock, so two GPUs time at once but one GPU never does.
        self._locks = {self._group(i): DeviceLock(self._ctx, workers) for i in range(workers)}
        self._workers = [self._start(i) for i in range(workers)]
        self._queue: deque = deque()
        self._done: deque[JobResult] = deque()
        self._pending = 0

    def _group(self, index: int) -> tuple:
        return tuple(sorted(self._per_worker[index % len(self._per_worker)].items()))

    def _start(self, index: int) -> _Worker:
        env = {**self._env, **self._per_worker[index % len(self._per_worker)]}
        return _Worker(self._ctx, self._target, self._locks[self._group(index)], env, index)

    @property
    def pending(self) -> int:
        """Jobs submitted and not yet returned."""
        return self._pending

    def submit(self, key: Any, payload: Any) -> None:
        """Queue a job; it starts as soon as a worker is free."""
        self._queue.append((key, payload))
        self._pending += 1
        self._dispatch()

    def _dispatch(self) -> None:
        for worker in self._workers:
            if worker.job is None and self._queue:
                worker.job = self._queue.popleft()
                worker.deadline = time.monotonic() + self._timeout_s
                worker.conn.send(worker.job)

    def _replace(self, index: int) -> None:
        old = self._workers[index]
        if old.process.is_alive():
            old.process.kill()
        old.process.join(timeout=10)
        old.conn.close()
        self._locks[self._group(index)].reset(index)  # what the killed worker held
        self._workers[index] = self._start(index)

    def next_result(self) -> JobResult:
        """Block until a job finishes (or fails, or passes its deadline)."""
        if self._pending == 0:
            raise RuntimeError("next_result() called with no job pending")
        while not self._done:
            busy = [w for w in self._workers if w.job is not None]
            now = time.monotonic()
            wait_s = max(0.0, min(w.deadline for w in busy) - now) if busy else 0.1
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy], wait_s)
            for i, worker in enumerate(list(self._workers)):
                if worker.job is None:
                    continue
                key = worker.job[0]
                if worker.conn in ready:
                    try:
                        rkey, ok, value, error = worker.conn.recv()
                    except (EOFError, OSError):
                        rkey, ok, value, error = key, False, None, "worker died"
                        self._replace(i)
                    else:
                        self._workers[i].job = None
                    self._done.append(JobResult(rkey, ok, value, error))
                elif worker.process.sentinel in ready or not worker.process.is_alive():
                    code = worker.process.exitcode
                    self._done.append(JobResult(key, False, None, f"worker died (exit {code})"))
                    self._replace(i)
                elif time.monotonic() > worker.deadline:
                    msg = f"timed out after {self._timeout_s:g} s"
                    self._done.append(JobResult(key, False, None, msg))
                    self._replace(i)
            self._dispatch()
        self._pending -= 1
        return self._done.popleft()

    def close(self) -> None:
        """Stop every worker; running jobs are abandoned."""
        for worker in self._workers:
            if worker.process.is_alive():
                if worker.job is None:
                    try:
                        worker.conn.send(None)
                    except OSError:
                        pass
                    worker.process.join(timeout=5)
                if worker.process.is_alive():
                    worker.process.kill()
                    worker.process.join(timeout=10)
            worker.conn.close()
        self._workers = []
        self._queue.clear()
        self._pending = 0
        self._locks = {}

    def __enter__(self) -> LocalProcessPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class InlinePool:
    """Runs each job in this process when its result is asked for (tests, debugging).

    No isolation and no timeouts: a crashing job takes the caller down. Same interface as
    LocalProcessPool.
    """

    def __init__(self, target: str) -> None:
        self._function = _resolve(target)
        self._queue: deque = deque()

    @property
    def pending(self) -> int:
        """Jobs submitted and not yet returned."""
        return len(self._queue)

    def submit(self, key: Any, payload: Any) -> None:
        """Queue a job."""
        self._queue.append((key, payload))

    def next_result(self) -> JobResult:
        """Run the oldest job now."""
        key, payload = self._queue.popleft()
        try:
            return JobResult(key, True, self._function(payload, None))
        except Exception:  # reported like a worker's error
            return JobResult(key, False, None, traceback.format_exc()[-3000:])

    def close(self) -> None:
        """Drop queued jobs."""
        self._queue.clear()
