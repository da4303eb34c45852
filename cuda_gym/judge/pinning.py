"""Page-lock host memory for the CUDA driver while large outputs are copied through it.

A copy between the GPU and pageable host memory goes through the driver's staging buffers, at a
few GiB/s; memory registered with the driver is copied by DMA at the bus's rate (measured
rates: benchmarks/README.md, "Output transfer"). The judge's arena
(cuda_gym.judge.transfer) is mapped anew in every worker, so each worker registers the pages it
copies through and releases them after.

Registration uses the driver API (libcuda's cuMemHostRegister), not the runtime's
cudaHostRegister: a failed driver call leaves no pending runtime error for PyTorch's next launch
check to report. Registration that fails (no driver, no current context, memory the driver
refuses) is not an error: the copies then go the pageable way. Linux pins the pages of a tmpfs
file such as the arena in /dev/shm, but refuses long-term pins of a disk filesystem's file pages.

CUDA_GYM_PIN_ARENA=0 turns registration off (to measure without it).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import mmap
import os
from collections.abc import Iterator

logger = logging.getLogger(__name__)

PIN_ENV = "CUDA_GYM_PIN_ARENA"
# Below this, registering (tens of microseconds plus per-page work) gains nothing worth having.
MIN_BYTES = 32 << 20
CU_MEMHOSTREGISTER_PORTABLE = 0x01

_driver_lib = None  # None: not loaded yet; False: unavailable


def _driver():
    """The CUDA driver library (libcuda) with two entry points typed; None where it is absent."""
    global _driver_lib
    if _driver_lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            lib.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
            lib.cuMemHostRegister_v2.restype = ctypes.c_int
            lib.cuMemHostUnregister.argtypes = [ctypes.c_void_p]
            lib.cuMemHostUnregister.restype = ctypes.c_int
            _driver_lib = lib
        except (OSError, AttributeError):
            _driver_lib = False
    return _driver_lib or None


def enabled() -> bool:
    """False when CUDA_GYM_PIN_ARENA is "0"."""
    return os.environ.get(PIN_ENV, "1").strip() != "0"


def page_up(n: int, page: int = mmap.PAGESIZE) -> int:
    """`n` rounded up to a whole number of pages."""
    return (n + page - 1) // page * page


def page_down(n: int, page: int = mmap.PAGESIZE) -> int:
    """`n` rounded down to a whole number of pages."""
    return n // page * page


def page_span(address: int, nbytes: int, page: int = mmap.PAGESIZE) -> tuple[int, int]:
    """(start, length) of the whole pages inside [address, address + nbytes); length may be 0."""
    start = page_up(address, page)
    end = page_down(address + nbytes, page)
    return start, max(0, end - start)


@contextlib.contextmanager
def registered(host) -> Iterator[bool]:
    """Page-lock the whole pages of a host tensor's memory while the block runs.

    Yields True when the pages are registered, False when they stay pageable (too small,
    switched off, or the driver refused; the block runs either way).
    """
    nbytes = host.numel() * host.element_size()
    start, length = page_span(host.data_ptr(), nbytes)
    driver = _driver() if enabled() and length >= MIN_BYTES else None
    if driver is None:
        yield False
        return
    status = driver.cuMemHostRegister_v2(start, length, CU_MEMHOSTREGISTER_PORTABLE)
    if status != 0:
        logger.debug("cuMemHostRegister of %d bytes failed (CUresult %d)", length, status)
        yield False
        return
    try:
        yield True
    finally:
        driver.cuMemHostUnregister(start)
