"""JudgeSlots: a process-wide bound on concurrent judge calls, shared by every env in a process.

Timed judgements (`profile`, `submit`, judging on truncation) take an exclusive slot: by default
one per GPU the judge can use (one on the CPU), so no two timings overlap on a device. Untimed
judge calls (`compile`, `run`) take one of a few shared slots. Envs whose device and slot sizes
match share one `JudgeSlots` (see `judge_slots`), so 64 envs in one process queue for the
device instead of oversubscribing it; the seconds each call waited are reported in `info`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cuda_gym.errors import ConfigError

# Untimed calls (builds, correctness runs) per GPU; they share the device while nothing is timed.
UNTIMED_SLOTS_PER_GPU = 4


@dataclass(frozen=True)
class SlotSizes:
    """How many judge calls may run at once in one process.

    Attributes:
        timed: Concurrent timed judgements (exclusive use of a device while timing).
        untimed: Concurrent untimed judge calls (compile, run).
    """

    timed: int
    untimed: int

    def __post_init__(self) -> None:
        if self.timed < 1 or self.untimed < 1:
            raise ConfigError(
                f"judge slots must be at least 1, got timed={self.timed}, untimed={self.untimed}"
            )


def default_slot_sizes(device: str, gpu_count: int = 1) -> SlotSizes:
    """Slot sizes from the device: one timed slot per GPU (one on the CPU), a few untimed.

    Args:
        device: "cuda" or "cpu".
        gpu_count: GPUs the judge's children can use (CUDA only).
    """
    if device == "cuda":
        gpus = max(1, gpu_count)
        return SlotSizes(timed=gpus, untimed=UNTIMED_SLOTS_PER_GPU * gpus)
    # On the CPU a judgement's children use the cores themselves: keep roughly one per core.
    return SlotSizes(timed=1, untimed=max(1, (os.cpu_count() or 1)))


class JudgeSlots:
    """Two counting semaphores (timed, untimed) that report how long each acquisition waited.

    Args:
        sizes: The number of slots of each kind.
    """

    def __init__(self, sizes: SlotSizes) -> None:
        self.sizes = sizes
        self._sems = {
            True: threading.BoundedSemaphore(sizes.timed),
            False: threading.BoundedSemaphore(sizes.untimed),
        }
        self._lock = threading.Lock()
        self._waiting = {True: 0, False: 0}
        self._running = {True: 0, False: 0}

    @contextmanager
    def hold(self, *, timed: bool) -> Iterator[float]:
        """Wait for a slot, yield the seconds waited, release the slot on exit (also on error)."""
        sem = self._sems[bool(timed)]
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
        try:
            yield waited
        finally:
            with self._lock:
                self._running[timed] -= 1
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
            }


_REGISTRY: dict[tuple[str, SlotSizes], JudgeSlots] = {}
_REGISTRY_LOCK = threading.Lock()


def judge_slots(device: str, sizes: SlotSizes) -> JudgeSlots:
    """The process-wide JudgeSlots for (device, sizes): every env asking for the same gets it."""
    with _REGISTRY_LOCK:
        slots = _REGISTRY.get((device, sizes))
        if slots is None:
            slots = _REGISTRY[(device, sizes)] = JudgeSlots(sizes)
        return slots
