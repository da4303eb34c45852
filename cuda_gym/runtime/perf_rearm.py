"""Restart per-CPU sampling timers at random after every tick (a process of its own).

Run by `perf_sampling.PerfSampler(rearm=True)` as a script, not imported: a process with no
interpreter lock to wait for (the sampler's process has threads that parse samples), at a
real-time priority where it is allowed.

    python -I -S perf_rearm.py LOW HIGH LOG_FD EVENT_FD...

Each event (one per CPU, opened with wakeup_events=1 so that each tick wakes a poll) is given a
new period drawn uniformly from [LOW, HIGH] ns after each tick (PERF_EVENT_IOC_PERIOD restarts
its timer from now). The restarts are logged in the shared memory at LOG_FD, one record per
event in its order: (sequence, ticks before the latest restart, its time (CLOCK_MONOTONIC ns),
the period since). The sequence is odd while a record is being written. The process ends when
its standard input closes (its parent's end of the pipe: the parent closed it, or died).
"""

import ctypes
import mmap
import os
import random
import select
import struct
import sys
import time

IOC_PERIOD = 0x40082404  # _IOW('$', 4, __u64)
RECORD = struct.Struct("QQQQ")


def main(argv: list[str]) -> int:
    """Re-arm the events named in `argv` (module doc) until standard input closes."""
    low, high, log_fd = (int(v) for v in argv[:3])
    fds = [int(v) for v in argv[3:]]
    try:  # woken first whoever else wants the CPU (a late restart lets the last period run on)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (OSError, AttributeError):
        pass
    log = mmap.mmap(log_fd, RECORD.size * len(fds))
    libc = ctypes.CDLL(None, use_errno=True)
    rng = random.Random()  # seeded from the OS
    armed = [RECORD.unpack_from(log, i * RECORD.size)[1:] for i in range(len(fds))]
    index = {fd: i for i, fd in enumerate(fds)}
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    stdin = sys.stdin.fileno()
    poller.register(stdin, select.POLLIN)
    sequence = [0] * len(fds)
    while True:
        for fd, events in poller.poll():
            if fd == stdin:
                return 0  # (its only input is the end of it)
            if events & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                poller.unregister(fd)  # (its CPU went offline: never a busy loop)
                continue
            new = ctypes.c_uint64(int(rng.uniform(low, high)))
            if libc.ioctl(fd, IOC_PERIOD, ctypes.byref(new)) != 0:
                continue
            now = time.monotonic_ns()
            i = index[fd]
            ticks, since, before = armed[i]
            armed[i] = (ticks + (now - since) // before, now, new.value)
            at = i * RECORD.size
            sequence[i] += 1
            struct.pack_into("Q", log, at, sequence[i])
            RECORD.pack_into(log, at, sequence[i], *armed[i])
            sequence[i] += 1
            struct.pack_into("Q", log, at, sequence[i])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
