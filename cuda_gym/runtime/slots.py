"""JudgeSlots: a process-wide bound on concurrent judge calls, shared by every env in a process.

A judgement holds a slot only for its device phase (probe, correctness, timing): its static
checks and builds come first, bounded by `build_slot` (one build per usable CPU core), so a
judgement compiling for a minute keeps no device slot from the ones ready to run.

Timed judgements (`profile`, `submit`, judging on truncation) take one of a few timed slots per
GPU (per core on the CPU); untimed judge calls (`compile`, `run`) one of the untimed slots. A slot
bounds how many judgements of this process share a device; it is not what keeps timings apart:
each judgement's worker takes the device's gate (cuda_gym.runtime.device_gate) alone only while
it times, so builds and correctness checks of several judgements overlap and timings do not.
Envs whose device and slot sizes match share one `JudgeSlots` (see `judge_slots`), so 64 envs in
one process queue for the device instead of oversubscribing it; the seconds each call waited
are reported in `info`.

With several GPUs, a slot also places the call on one: a timed call gets a GPU no other timed
call holds, an untimed call the least busy GPU (preferring one that is not being timed). While
the slot is held, `current_gpu()` names that GPU in the holding thread, and the judge starts its
worker processes with `CUDA_VISIBLE_DEVICES` set to it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from cuda_gym.errors import ConfigError

# Untimed calls (builds, correctness runs) per GPU; they share the device while nothing is timed.
UNTIMED_SLOTS_PER_GPU = 4
# Timed judgements per GPU at once: their builds and correctness checks overlap, their timings
# take turns at the device's gate.
TIMED_SLOTS_PER_GPU = 8


@dataclass(frozen=True)
class SlotSizes:
    """How many judge calls may run at once in one process.

    Attributes:
        timed: Concurrent timed judgements (each times alone, at the device's gate).
        untimed: Concurrent untimed judge calls (compile, run).
    """

    timed: int
    untimed: int

    def __post_init__(self) -> None:
        if self.timed < 1 or self.untimed < 1:
            raise ConfigError(
                f"judge slots must be at least 1, got timed={self.timed}, untimed={self.untimed}"
            )


def default_slot_sizes(
    device: str, gpu_count: int = 1, timed: int | None = None, untimed: int | None = None
) -> SlotSizes:
    """Slot sizes from the device: a few judgements per GPU, one per core on the CPU.

    Args:
        device: "cuda" or "cpu".
        gpu_count: GPUs the judge's children can use (CUDA only).
        timed: Timed slots in place of the device's default (None: the default).
        untimed: Untimed slots in place of the device's default (None: the default).
    """
    if device == "cuda":
        gpus = max(1, gpu_count)
        default = SlotSizes(timed=TIMED_SLOTS_PER_GPU * gpus, untimed=UNTIMED_SLOTS_PER_GPU * gpus)
    else:
        # On the CPU a judgement's children use the cores themselves: roughly one per core.
        cores = usable_cores()
        default = SlotSizes(timed=cores, untimed=cores)
    return SlotSizes(
        timed=default.timed if timed is None else timed,
        untimed=default.untimed if untimed is None else untimed,
    )


def usable_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_BUILDS = threading.BoundedSemaphore(usable_cores())


@contextmanager
def build_slot() -> Iterator[float]:
    """Hold one of the process's build slots (one per usable core); yield the seconds waited."""
    start = time.monotonic()
    _BUILDS.acquire()
    try:
        yield time.monotonic() - start
    finally:
        _BUILDS.release()


_CURRENT_GPU: ContextVar[str | None] = ContextVar("cuda_gym_current_gpu", default=None)


def current_gpu() -> str | None:
    """The GPU (as CUDA_VISIBLE_DEVICES names it) of the slot this thread holds, if any."""
    return _CURRENT_GPU.get()


@contextmanager
def use_gpu(gpu: str | None) -> Iterator[None]:
    """Run the block as if holding a slot on `gpu` (None: the default device)."""
    token = _CURRENT_GPU.set(gpu)
    try:
        yield
    finally:
        _CURRENT_GPU.reset(token)


def visible_gpus(count: int) -> tuple[str, ...]:
    """The ids of the first `count` GPUs this process may use, as children should be told.

    CUDA_VISIBLE_DEVICES, when set, names them (indices or UUIDs); otherwise 0..count-1.
    """
    listed = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    listed = [g for g in listed if g]
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return tuple(listed[:count])
    return tuple(str(i) for i in range(count))


class JudgeSlots:
    """Two counting semaphores (timed, untimed) that report how long each acquisition waited.

    Args:
        sizes: The number of slots of each kind.
        gpus: GPUs to place calls on (see the module doc); empty: no placement.
    """

    def __init__(self, sizes: SlotSizes, gpus: Sequence[str] = ()) -> None:
        self.sizes = sizes
        self.gpus = tuple(gpus)
        self._sems = {
            True: threading.BoundedSemaphore(sizes.timed),
            False: threading.BoundedSemaphore(sizes.untimed),
        }
        self._lock = threading.Lock()
        self._waiting = {True: 0, False: 0}
        self._running = {True: 0, False: 0}
        self._timed_on = dict.fromkeys(self.gpus, 0)
        self._calls_on = dict.fromkeys(self.gpus, 0)

    def _place(self, timed: bool) -> str | None:
        """Pick a GPU for a call (lock held)."""
        if not self.gpus:
            return None
        if timed:
            return min(self.gpus, key=lambda g: (self._timed_on[g], self._calls_on[g]))
        return min(self.gpus, key=lambda g: (self._timed_on[g] > 0, self._calls_on[g]))

    @contextmanager
    def hold(self, *, timed: bool) -> Iterator[float]:
        """Wait for a slot, yield the seconds waited, release the slot on exit (also on error).

        With GPUs, `current_gpu()` names the call's GPU inside the block.
        """
        timed = bool(timed)
        sem = self._sems[timed]
        start = time.monotonic()
        with self._lock:
            self._waiting[timed] += 1
        try:
            sem.acquire()
        finally:
            with self._lock:
                self._waiting[timed] -= 1
        waited = time.monotonic() - start
        with self._lock:
            self._running[timed] += 1
            gpu = self._place(timed)
            if gpu is not None:
                self._calls_on[gpu] += 1
                self._timed_on[gpu] += int(timed)
        try:
            with use_gpu(gpu):
                yield waited
        finally:
            with self._lock:
                self._running[timed] -= 1
                if gpu is not None:
                    self._calls_on[gpu] -= 1
                    self._timed_on[gpu] -= int(timed)
            sem.release()

    def stats(self) -> dict:
        """Current queue depth and running calls of each kind."""
        with self._lock:
            return {
                "timed_running": self._running[True],
                "timed_waiting": self._waiting[True],
                "untimed_running": self._running[False],
                "untimed_waiting": self._waiting[False],
                "timed_slots": self.sizes.timed,
                "untimed_slots": self.sizes.untimed,
                "calls_per_gpu": dict(self._calls_on),
            }


_REGISTRY: dict[tuple[str, SlotSizes, tuple[str, ...]], JudgeSlots] = {}
_REGISTRY_LOCK = threading.Lock()


def judge_slots(device: str, sizes: SlotSizes, gpus: Sequence[str] = ()) -> JudgeSlots:
    """The process-wide JudgeSlots for (device, sizes, gpus): all who ask for the same share it."""
    key = (device, sizes, tuple(gpus))
    with _REGISTRY_LOCK:
        slots = _REGISTRY.get(key)
        if slots is None:
            slots = _REGISTRY[key] = JudgeSlots(sizes, gpus)
        return slots
