"""Where another process spends its CPU time, sampled from outside it with Linux perf events.

`PerfSampler(pid)` samples the user-space instruction pointer of a process, its descendants and
every thread they start, every `period_ns` of CPU time, in one of two ways (`perf_event_open(2)`):

- per thread (the default): one software "task-clock" event per thread of each process and per
  online CPU, inherited by every thread and child those threads start later. Each inherited
  event starts its period afresh, so a thread that ends before `period_ns` of CPU time is never
  sampled: work split over short-lived threads goes unseen.
- per CPU (`per_cpu=True`): one "cpu-clock" event per online CPU that samples whoever runs
  there, with the kernel's fork and exit records; the sampler follows the process's threads and
  descendants through those records (`Threads`) and keeps the samples of those threads alive
  at the sample's time only (a thread id reused by another process is not followed). Short-lived
  threads are sampled like any other. The kernel allows it to root, CAP_PERFMON or
  `kernel.perf_event_paranoid` <= 0; each event fires on its CPU whoever runs there.

  A CPU's timer fires at a fixed period, and its interrupt shows as a gap in the clock of
  whoever runs there: a thread that learns the phase can make every tick land where it likes
  (asleep, or in a moment of code of its own). With `rearm` a process of the sampler's
  (`perf_rearm`) wakes at each tick and restarts that CPU's timer with a random period
  (`PERF_EVENT_IOC_PERIOD`), so that the next tick can come any time from 3 % of the period
  on: a thread would have to keep out of sight most of its time. Every tick must wake it, so
  these events sample the kernel too (idle CPUs included); a sample in the kernel has the ip
  `KERNEL_IP`. The restarts are logged and `mean_period_ns()` says how much time a tick
  stood for on average. The process wakes ~470 times a second per online CPU (~30 us of CPU
  each on CI's VM, where the restart is a cross-CPU call: 3 % of a core for two CPUs).

The events belong to the sampling process: the sampled one cannot see, stop or reconfigure them.
A thread of the sampler empties the ring buffers every `drain_s` (a full ring drops new samples,
and counts them as lost) and rereads the processes' memory maps, so that a library loaded and
unloaded between two looks is still attributed to whoever was mapped where.

The kernel decides who may sample whom: root (or CAP_PERFMON) always; otherwise, per thread,
`kernel.perf_event_paranoid` <= 2 and ptrace rights over the target. Where it refuses,
`PerfUnavailable` says why; callers decide whether that is fatal.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import mmap
import os
import platform
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_SYSCALL = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331}
_ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7
_TYPE_SOFTWARE, _SW_CPU_CLOCK, _SW_TASK_CLOCK = 1, 0, 1
_SAMPLE_IP, _SAMPLE_TID, _SAMPLE_TIME = 1, 2, 4
# perf_event_attr flag bits
_DISABLED, _INHERIT, _EXCLUDE_KERNEL, _EXCLUDE_HV, _TASK, _USE_CLOCKID = 0, 1, 5, 6, 13, 25
_CLOCK_MONOTONIC = 1
_RECORD_LOST, _RECORD_EXIT, _RECORD_FORK, _RECORD_SAMPLE, _RECORD_MMAP2 = 2, 4, 7, 9, 10
_MMAP, _COMM, _SAMPLE_ID_ALL, _MMAP2, _COMM_EXEC = 8, 9, 18, 23, 24  # perf_event_attr flag bits
_RECORD_COMM, _MISC_COMM_EXEC = 3, 1 << 13  # a COMM record that an execve wrote
_NEVER = 1 << 63  # the end of a thread's life that has not ended
_EXITING_NS = 20_000_000  # how long a thread's exit may run in the kernel after its record
_IOC_ENABLE, _IOC_DISABLE = 0x2400, 0x2401
_IOC_PERIOD = 0x40082404  # _IOW('$', 4, __u64)
# Re-arming per CPU (see PerfSampler): after each tick, a period drawn uniformly from this
# share of the one asked for (the wake-up adds its latency: `mean_period_ns` measures).
_REARM_PERIOD = (0.03, 1.97)
_REARM_RECORD = struct.Struct("QQQQ")  # perf_rearm's log: sequence, ticks before, since, period
KERNEL_IP = (1 << 64) - 1  # the ip of a sample taken in the kernel (with `rearm`)
_MISC_CPUMODE, _MISC_KERNEL = 7, 1
_PAGE = mmap.PAGESIZE
_KERNEL_IPS_KEPT = 1 << 20  # kernel addresses of samples read but not taken, at most


class PerfUnavailable(Exception):
    """The kernel refused to sample the process (a message that says why and what allows it)."""


@dataclass(frozen=True)
class Mapping:
    """One executable mapping of a process: [start, end) from `offset` of `path` ("" if none)."""

    start: int
    end: int
    offset: int
    path: str


@dataclass
class Samples:
    """What a sampler collected: (ip, pid, tid, CLOCK_MONOTONIC ns) rows and their context."""

    rows: list[tuple[int, int, int, int]] = field(default_factory=list)
    lost: int = 0
    # pid -> every executable mapping seen in it while sampling (a union over the looks)
    maps: dict[int, set[Mapping]] = field(default_factory=dict)
    # (pid, how many execs it made while sampled) -> the executable mappings of that image
    # (per CPU only): an exec maps the C library and the loader anew, elsewhere
    images: dict[tuple[int, int], set[Mapping]] = field(default_factory=dict)
    # Per CPU, where rings hold everyone's records: the lost ones in proportion to the records
    # of others (not the sampled tree's) read beside them, drain by drain: a full ring that
    # others filled says nothing about the tree, one that the tree filled hid its own work.
    lost_to_others: float = 0.0
    # Per CPU: (tid, time) -> the kernel address of each sample taken in the kernel (its row's
    # ip is KERNEL_IP): what the kernel was doing (`kernel_symbols`).
    kernel_ips: dict[tuple[int, int], int] = field(default_factory=dict)

    def add_maps(self, pid: int, execs: int, mappings) -> None:
        """Add executable mappings of `pid` seen after its `execs`-th exec (to both views)."""
        self.maps.setdefault(pid, set()).update(mappings)
        self.images.setdefault((pid, execs), set()).update(mappings)


def _online_cpus() -> list[int]:
    try:
        text = Path("/sys/devices/system/cpu/online").read_text().strip()
    except OSError:
        return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


def _attr(period_ns: int, per_cpu: bool = False, rearm: bool = False) -> ctypes.Array:
    raw = bytearray(_ATTR_SIZE)
    sample_type = _SAMPLE_IP | _SAMPLE_TID | _SAMPLE_TIME
    clock = _SW_CPU_CLOCK if per_cpu else _SW_TASK_CLOCK
    struct.pack_into("IIQQQQ", raw, 0, _TYPE_SOFTWARE, _ATTR_SIZE, clock, period_ns, sample_type, 0)
    flags = 0
    # per CPU: the fork and exit records of every task there instead of inheritance, its
    # executable mappings as they are made and its execs (with their time: sample_id_all)
    follow = (_TASK, _MMAP, _MMAP2, _COMM, _COMM_EXEC, _SAMPLE_ID_ALL) if per_cpu else (_INHERIT,)
    # re-armed after each tick: every tick must be seen, wherever it lands (idle CPUs too: a
    # timer left running at a short period there would tick more often than the mean says,
    # and the mean is taken over all CPUs), and wake the sampler
    excluded = (_EXCLUDE_HV,) if rearm else (_EXCLUDE_KERNEL, _EXCLUDE_HV)
    for bit in (_DISABLED, *follow, _USE_CLOCKID, *excluded):
        flags |= 1 << bit
    struct.pack_into("Q", raw, 40, flags)
    if rearm:
        struct.pack_into("I", raw, 48, 1)  # wakeup_events
    struct.pack_into("i", raw, 92, _CLOCK_MONOTONIC)
    return ctypes.create_string_buffer(bytes(raw), _ATTR_SIZE)


def executable_maps(pid: int) -> set[Mapping]:
    """The executable mappings of process `pid` now (empty if it is gone)."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    found = set()
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 5 or "x" not in fields[1]:
            continue
        start, _, end = fields[0].partition("-")
        path = fields[5].strip() if len(fields) == 6 else ""
        found.add(Mapping(int(start, 16), int(end, 16), int(fields[2], 16), path))
    return found


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc/PID/task/TID/children; a scan of /proc without)."""
    found, stack = [], [pid]
    try:
        while stack:
            p = stack.pop()
            found.append(p)
            for tid in _threads(p):
                stack += [
                    int(c) for c in Path(f"/proc/{p}/task/{tid}/children").read_text().split()
                ]
        return found
    except FileNotFoundError:
        if Path(f"/proc/{pid}/task/{pid}/children").exists():
            return found  # a process ended while we looked
    except (OSError, ValueError):
        pass
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        stack += children.get(p, [])
    return found


def tree_cpu_times(pid: int) -> tuple[float, float]:
    """CPU seconds of `pid` and its descendants (their reaped children too): (user, user + kernel).

    User time is what a sampler of user-space instruction pointers can see; a process's count
    includes its threads that have exited.
    """
    user = total = 0
    for member in process_tree(pid):
        try:
            text = Path(f"/proc/{member}/stat").read_text()
            fields = [int(v) for v in text[text.rindex(")") + 2 :].split()[11:15]]
        except (OSError, ValueError, IndexError):
            continue
        user += fields[0] + fields[2]  # utime cutime
        total += sum(fields)  # utime stime cutime cstime
    return user / _CLOCK_TICKS, total / _CLOCK_TICKS


def tree_cpu_ns(pid: int) -> int:
    """CPU time, user and kernel, of `pid` and its descendants, in ns.

    Each process's own from its CPU-time clock (`clock_getcpuclockid`: to the nanosecond, its
    ended threads included; /proc/PID/stat counts in ticks of 10 ms, an error of up to 20 ms
    a process at each read), its reaped children's from /proc.
    """
    total = 0
    for member in process_tree(pid):
        try:
            total += time.clock_gettime_ns(((~member) << 3) | 2)  # its CPUCLOCK_SCHED
        except OSError:
            continue  # gone meanwhile
        try:
            text = Path(f"/proc/{member}/stat").read_text()
            fields = text[text.rindex(")") + 2 :].split()
            total += (int(fields[13]) + int(fields[14])) * 1_000_000_000 // _CLOCK_TICKS
        except (OSError, ValueError, IndexError):
            pass
    return total


def tree_cpu_s(pid: int) -> float:
    """CPU seconds, user and kernel, of `pid` and its descendants (their reaped children too)."""
    return tree_cpu_times(pid)[1]


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Threads:
    """Which threads belong to a process tree, when: followed through fork and exit records.

    Starts from the threads of `root` and its descendants alive now. A fork record (pid, ppid,
    tid, ptid, time) made by a member thread makes the new thread a member from then on; an exit
    record ends a member's life, except a process's first thread's while another of its threads
    lives (a thread that calls execve takes the first thread's id, and the kernel records the
    first thread's exit). Records from different CPUs arrive out of order: each look sorts its
    records by time, and a record or sample that names no member yet waits for the next look (a
    parent's fork record read a moment after its child's) before it is dropped. Each look also
    reads the tree's threads in /proc (`look`): one alive there is a member, one no longer
    anywhere in /proc is not.
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self.lives: dict[int, list[list[int]]] = {}  # tid -> [[start, end], ...] (ns)
        self._process: dict[int, int] = {}  # tid -> its process (of its latest life)
        self._open: set[int] = set()  # tids whose latest life has not ended
        self._tasks: list[tuple[int, ...]] = []  # waiting: (time, kind, pid, tid, ptid)
        self._rows: list[tuple[int, int, int, int]] = []  # waiting samples
        self.look(0, 0)

    def look(self, since: int, now: int) -> None:
        """Read the tree in /proc: its threads are members, from `since` if not already.

        A member no longer anywhere in /proc ended by `now`.
        """
        alive = {tid: proc for proc in process_tree(self.root) for tid in _threads(proc)}
        for tid, proc in alive.items():
            self._begin(tid, proc, since)
        for tid in list(self._open):
            if tid not in alive and not Path(f"/proc/{tid}").exists():
                life = self.lives[tid][-1]
                life[1] = max(now, life[0])
                self._open.discard(tid)

    def _begin(self, tid: int, proc: int, at: int) -> None:
        lives = self.lives.setdefault(tid, [])
        if not lives or lives[-1][1] != _NEVER:
            lives.append([at, _NEVER])
            self._process[tid] = proc
            self._open.add(tid)

    def member(self, tid: int, at: int) -> bool:
        """Whether thread `tid` belonged to the tree at time `at`."""
        return self._life(tid, at) is not None

    def _life(self, tid: int, at: int) -> list[int] | None:
        return next((life for life in self.lives.get(tid, ()) if life[0] <= at <= life[1]), None)

    def _siblings_alive(self, tid: int, at: int) -> bool:
        proc = self._process.get(tid)
        return any(
            other != tid and self._process.get(other) == proc and self.member(other, at)
            for other in self._open
        )

    def take(self, tasks: list, rows: list) -> list[tuple[int, int, int, int]]:
        """Follow new fork/exit records (time, kind, pid, tid, ptid); the members' samples.

        rows: new samples (ip, pid, tid, time). Both may wait one look for a late record.
        """
        records = [(r, True) for r in self._tasks] + [(r, False) for r in tasks]
        self._tasks = []
        for record, waited in sorted(records):
            at, kind, pid, tid, ptid = record
            if kind == _RECORD_FORK and self.member(ptid, at):
                self._begin(tid, pid, at)
            elif kind == _RECORD_EXIT and self.member(tid, at):
                if not (tid == pid and self._siblings_alive(tid, at)):
                    life = self._life(tid, at)
                    if life[1] == _NEVER:
                        self._open.discard(tid)
                    life[1] = at
            elif not waited:
                self._tasks.append(record)
        kept, waiting, self._rows = [], self._rows, []
        for row in waiting:
            if self._sampled(row):
                kept.append(row)
        for row in rows:
            if self._sampled(row):
                kept.append(row)
            else:
                self._rows.append(row)
        return kept

    def _sampled(self, row: tuple[int, int, int, int]) -> bool:
        """Whether a sample (ip, pid, tid, time) is a member's.

        A thread's exit record is written early in its exit: the rest of the exit runs in the
        kernel, under the same id, for a moment after (thousands of short threads: most of
        their kernel time).
        """
        ip, _, tid, at = row
        if self.member(tid, at):
            return True
        return ip == KERNEL_IP and any(
            end < at <= end + _EXITING_NS for _, end in self.lives.get(tid, ())
        )


class PerfSampler:
    """Samples process `pid`, its descendants and everything they start (see the module doc).

    per_cpu: one event per CPU, following the tree by fork and exit records (else one inherited
    event per thread). rearm (per CPU only): after each tick restart that CPU's timer with a
    random period, and sample the kernel too (module doc). Use as a context manager, or call
    `close`. `collect()` drains once more and returns every sample so far (and clears them).
    """

    def __init__(
        self,
        pid: int,
        period_ns: int = 1_000_000,
        buffer_bytes: int = 16 << 20,
        drain_s: float = 0.2,
        keep: bool = True,
        per_cpu: bool = False,
        rearm: bool = False,
    ) -> None:
        number = _SYSCALL.get(platform.machine())
        if number is None:
            raise PerfUnavailable(f"perf events: no system call number for {platform.machine()}")
        self.pid = pid
        self.keep = keep  # False: sample (for what it costs the process) but keep nothing
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long
        self._fds: list[int] = []
        self._rings: list[mmap.mmap] = []
        self._samples = Samples()
        self._kernel_ips: dict[tuple[int, int], int] = {}  # read, not yet taken (_drain)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._quiet = threading.Event()
        self._pids = process_tree(pid)
        self.threads: Threads | None = None
        self.period_ns = period_ns
        # per event: since when it runs, at which period (until the re-arming process's log)
        self._armed: list[tuple[int, int]] = []
        self._started: list[int] = []
        self._final_mean_ns: float | None = None  # mean_period_ns when closed
        # per CPU ring: records read at the last drain, the tree's of them
        self._records: dict[int, tuple[int, int]] = {}
        self._execs: dict[int, int] = {}  # pid -> execs seen (its image in Samples.images)
        if per_cpu:
            targets = [(-1, cpu) for cpu in _online_cpus()]
        else:
            targets = [(t, cpu) for p in self._pids for t in _threads(p) for cpu in _online_cpus()]
        # Ring sizes: a power of two of pages each, within `buffer_bytes` in all. A CPU's ring
        # holds everyone's samples there and every task's fork and exit: larger.
        pages, most = 4, 512 if per_cpu else 64
        while pages < most and 2 * pages * _PAGE * len(targets) <= buffer_bytes:
            pages *= 2
        rearm = rearm and per_cpu
        attr = _attr(period_ns, per_cpu, rearm)
        try:
            for tid, cpu in targets:
                self._open(number, attr, tid, cpu, pages)
        except BaseException:
            self.close()
            raise
        if not self._fds:
            raise PerfUnavailable(f"perf events: process {pid} is gone")
        self._look_at_maps()
        for fd in self._fds:
            self._libc.ioctl(fd, _IOC_ENABLE, 0)
            self._armed.append((time.monotonic_ns(), period_ns))
            self._started.append(self._armed[-1][0])
        if per_cpu:  # (after enabling: a thread started meanwhile has a fork record)
            self.threads = Threads(pid)
            self._looked = time.monotonic_ns()
            if not any(self.threads.lives):
                self.close()
                raise PerfUnavailable(f"perf events: process {pid} is gone")
        self._thread = threading.Thread(target=self._drain_every, args=(drain_s,), daemon=True)
        self._thread.start()
        self._rearming: subprocess.Popen | None = None
        if rearm:
            try:
                self._start_rearming()
            except BaseException:
                self.close()
                raise

    def quiet(self, on: bool) -> None:
        """Stop (True) or resume (False) the background draining (e.g. around a timed call)."""
        if on:
            self._quiet.set()
        else:
            self._quiet.clear()

    def _open(self, number: int, attr, tid: int, cpu: int, data_pages: int) -> None:
        fd = self._libc.syscall(number, attr, tid, cpu, -1, 0)
        if fd < 0:
            err = ctypes.get_errno()
            if err == 3:  # ESRCH: the thread ended meanwhile
                return
            raise PerfUnavailable(_refusal(err))
        self._fds.append(fd)
        try:
            self._rings.append(mmap.mmap(fd, (1 + data_pages) * _PAGE))
        except OSError as exc:
            raise PerfUnavailable(
                f"perf events: mapping a sample buffer failed ({exc}); the locked-memory limit "
                "for perf buffers (kernel.perf_event_mlock_kb) may be too small"
            ) from exc

    def _drain_every(self, drain_s: float) -> None:
        while not self._stop.wait(drain_s):
            if not self._quiet.is_set():
                self._drain()

    def mean_period_ns(self) -> float:
        """The mean time between two ticks of an event so far (`period_ns` unless re-armed).

        Raises PerfUnavailable if the re-arming process ended before `close` (the ticks could
        be foreseen from then on: never a silent fallback).
        """
        if self._rearming is None:
            return self._final_mean_ns or float(self.period_ns)
        if self._rearming.poll() is not None:
            raise PerfUnavailable(
                "perf events: the process re-arming the sampling timers ended (exit status "
                f"{self._rearming.returncode}): their ticks could be foreseen since"
            )
        now = time.monotonic_ns()
        ticks = 0
        for i in range(len(self._fds)):
            for _ in range(100):  # a record being written: read it again
                sequence, before, since, period = _REARM_RECORD.unpack_from(
                    self._rearm_log, i * _REARM_RECORD.size
                )
                again = struct.unpack_from("Q", self._rearm_log, i * _REARM_RECORD.size)[0]
                if sequence % 2 == 0 and again == sequence:
                    break
            ticks += before + (now - since) // max(1, period)
        span = sum(now - start for start in self._started)
        return span / ticks if ticks else float(self.period_ns)

    def _start_rearming(self) -> None:
        """Start the process that restarts each event's timer after its ticks (module doc)."""
        log_fd = os.memfd_create("perf-rearm-log")
        try:
            os.ftruncate(log_fd, _REARM_RECORD.size * len(self._fds))
            self._rearm_log = mmap.mmap(log_fd, _REARM_RECORD.size * len(self._fds))
            for i, (since, period) in enumerate(self._armed):
                at = i * _REARM_RECORD.size
                _REARM_RECORD.pack_into(self._rearm_log, at, 0, 0, since, period)
            low, high = (int(share * self.period_ns) for share in _REARM_PERIOD)
            script = Path(__file__).with_name("perf_rearm.py")
            self._rearming = subprocess.Popen(
                [sys.executable, "-I", "-S", str(script), str(low), str(high), str(log_fd)]
                + [str(fd) for fd in self._fds],
                stdin=subprocess.PIPE,
                pass_fds=(log_fd, *self._fds),
            )
        finally:
            os.close(log_fd)

    def _look_at_maps(self) -> None:
        for proc in set(self._pids) | {row[1] for row in self._samples.rows[-64:]}:
            maps = executable_maps(proc)
            if maps:
                self._samples.add_maps(proc, self._execs.get(proc, 0), maps)

    def _drain(self) -> None:
        with self._lock:
            rows: list[tuple[int, int, int, int]] = []
            tasks: list[tuple[int, int, int, int, int]] = []
            # per ring: (its rows, its fork and exit records, its mapping and COMM records, lost)
            read = []
            mappings: list[tuple[int, int, int, Mapping]] = []
            execs: list[tuple[int, int, int, bool]] = []  # (time, pid, tid, True)
            for ring in self._rings:
                ring_rows, ring_tasks, ring_maps, ring_comms = [], [], [], []
                lost = self._read_ring(ring, ring_rows, ring_tasks, ring_maps, ring_comms)
                read.append((ring_rows, ring_tasks, ring_maps + ring_comms, lost))
                rows += ring_rows
                tasks += ring_tasks
                mappings += ring_maps
                execs += [comm for comm in ring_comms if comm[3]]
            if self.threads is not None:
                now = time.monotonic_ns()
                rows = self.threads.take(tasks, rows)
                self.threads.look(self._looked, now)  # (a fork or exit record lost, an execve)
                self._looked = now
                self._put_down_lost(read)
                # Every executable mapping a member made, as it was made: code mapped over
                # another's for the length of a call is seen, whenever the maps are read. An
                # exec starts a new image (the exec's record comes before the new mappings').
                for at, pid, tid, m in sorted(mappings + execs, key=lambda r: r[0]):
                    if not (self.threads.member(tid, at) or pid in self._pids):
                        continue
                    if not isinstance(m, Mapping):  # (an exec)
                        self._execs[pid] = self._execs.get(pid, 0) + 1
                        continue
                    self._samples.add_maps(pid, self._execs.get(pid, 0), (m,))
            if self.keep:
                self._samples.rows += rows
                for _, _, tid, at in (row for row in rows if row[0] == KERNEL_IP):
                    ip = self._kernel_ips.pop((tid, at), None)
                    if ip is not None:
                        self._samples.kernel_ips[(tid, at)] = ip
            if len(self._kernel_ips) > _KERNEL_IPS_KEPT:  # (others', or rows long waiting)
                self._kernel_ips.clear()
            self._pids = process_tree(self.pid) or self._pids
            self._look_at_maps()

    def _put_down_lost(self, read: list) -> None:
        """Per CPU, count the records each ring lost as others' in proportion to its records.

        read: per ring, the rows, fork and exit records, mapping and COMM records and lost count
        of this drain. The kernel writes a lost record once there is room again, at the drain
        after the one that found the ring full: that drain's records count too. (Mapping and
        COMM records count like the rest: a tree mapping code or renaming its threads in a loop
        fills its rings with its own.)
        """
        member = self.threads.member
        for i, (rows, tasks, marks, lost) in enumerate(read):
            rows = [row for row in rows if row[1]]  # (an idle CPU's are nobody's)
            own = sum(1 for row in rows if member(row[2], row[3]))
            for at, kind, _, tid, ptid in tasks:  # a member's fork or exit
                own += member(ptid if kind == _RECORD_FORK else tid, at)
            own += sum(1 for at, pid, tid, _ in marks if member(tid, at) or pid in self._pids)
            records = len(rows) + len(tasks) + len(marks)
            before = self._records.get(i, (0, 0))
            self._records[i] = (records, own)
            if lost:
                records, own = records + before[0], own + before[1]
                self._samples.lost_to_others += lost * (records - own) / max(1, records)

    def _read_ring(
        self,
        ring: mmap.mmap,
        rows: list,
        tasks: list,
        mappings: list | None = None,
        comms: list | None = None,
    ) -> int:
        """Move the ring's samples to `rows` and its fork and exit records to `tasks`.

        mappings: where to put its executable mappings' records (time, pid, tid, Mapping);
        comms: its COMM records' (time, pid, tid, whether an exec wrote it).
        Returns how many records it lost since the last read (counted in the samples too).
        """
        head = struct.unpack_from("Q", ring, 1024)[0]
        tail = struct.unpack_from("Q", ring, 1032)[0]
        if head == tail:
            return 0
        data_offset, data_size = struct.unpack_from("QQ", ring, 1040)
        if data_size == 0:  # kernels before 4.1 leave these empty
            data_offset, data_size = _PAGE, len(ring) - _PAGE
        data = ring[data_offset : data_offset + data_size]
        lost = 0
        while tail < head:
            start = tail % data_size
            record = data[start : start + 8]
            if len(record) < 8:
                record += data[: 8 - len(record)]
            kind, misc, length = struct.unpack("IHH", record)
            if length < 8:
                break
            body = data[start : start + length]
            if len(body) < length:
                body += data[: length - len(body)]
            if kind == _RECORD_SAMPLE and length >= 32 and self.keep:
                ip, pid, tid, at = struct.unpack_from("QIIQ", body, 8)
                if misc & _MISC_CPUMODE == _MISC_KERNEL:
                    self._kernel_ips[(tid, at)] = ip
                    ip = KERNEL_IP
                rows.append((ip, pid, tid, at))
            elif kind in (_RECORD_FORK, _RECORD_EXIT) and length >= 32:
                pid, _, tid, ptid, at = struct.unpack_from("IIIIQ", body, 8)
                tasks.append((at, kind, pid, tid, ptid))
            elif kind == _RECORD_MMAP2 and length >= 80 and mappings is not None:
                pid, tid, address, span, file_offset = struct.unpack_from("IIQQQ", body, 8)
                name = body[72 : length - 16].split(b"\0", 1)[0].decode(errors="replace")
                at = struct.unpack_from("Q", body, length - 8)[0]  # (sample_id: pid tid time)
                path = "" if name == "//anon" else name
                mappings.append((at, pid, tid, Mapping(address, address + span, file_offset, path)))
            elif kind == _RECORD_COMM and length >= 32 and comms is not None:
                pid, tid = struct.unpack_from("II", body, 8)
                at = struct.unpack_from("Q", body, length - 8)[0]  # (sample_id: pid tid time)
                comms.append((at, pid, tid, bool(misc & _MISC_COMM_EXEC)))
            elif kind == _RECORD_LOST and length >= 24:
                lost += struct.unpack_from("Q", body, 16)[0]
            tail += length
        self._samples.lost += lost
        struct.pack_into("Q", ring, 1032, head)
        return lost

    def collect(self) -> Samples:
        """Every sample since the last `collect` (and the maps seen so far; drains first)."""
        self._drain()
        with self._lock:
            taken = self._samples
            self._samples = Samples(
                maps={p: set(m) for p, m in taken.maps.items()},
                images={k: set(m) for k, m in taken.images.items()},
            )
        return taken

    def close(self) -> None:
        """Stop sampling and free the events and their buffers."""
        self._stop.set()
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.join()
        rearming = getattr(self, "_rearming", None)
        if rearming is not None:  # (it holds the events open too: ended before they are freed)
            try:
                self._final_mean_ns = self.mean_period_ns()
            except PerfUnavailable:
                pass
            rearming.stdin.close()
            try:
                rearming.wait(5)
            except subprocess.TimeoutExpired:
                rearming.kill()
                rearming.wait()
            self._rearming = None
            self._rearm_log.close()
        for fd in self._fds:
            self._libc.ioctl(fd, _IOC_DISABLE, 0)
        for ring in self._rings:
            ring.close()
        for fd in self._fds:
            os.close(fd)
        self._fds, self._rings = [], []

    def __enter__(self) -> PerfSampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _refusal(err: int) -> str:
    reason = os.strerror(err)
    try:
        paranoid = Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
    except OSError:
        paranoid = "unknown"
    if err in (1, 13):  # EPERM, EACCES
        return (
            f"perf events refused ({reason}; kernel.perf_event_paranoid = {paranoid}): run "
            "the judge as root or with CAP_PERFMON, or allow sampling your own processes with "
            "`sysctl kernel.perf_event_paranoid=2`"
        )
    if err == 2 or err == 38:  # ENOENT, ENOSYS
        return f"perf events are not available in this kernel ({reason})"
    return f"perf events: perf_event_open failed ({reason})"


@functools.lru_cache(maxsize=1)
def _kallsyms() -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The kernel's text symbols, sorted by address (empty where their addresses are hidden)."""
    starts, names = [], []
    try:
        with open("/proc/kallsyms") as f:
            for line in f:
                address, kind, name = line.split()[:3]
                if kind in "tTwW" and int(address, 16):
                    starts.append(int(address, 16))
                    names.append(name)
    except (OSError, ValueError):
        return (), ()
    order = sorted(range(len(starts)), key=starts.__getitem__)
    return tuple(starts[i] for i in order), tuple(names[i] for i in order)


def kernel_symbol(ip: int) -> str | None:
    """The kernel function at address `ip` (/proc/kallsyms), or None where unknown."""
    starts, names = _kallsyms()
    k = bisect.bisect_right(starts, ip) - 1
    return names[k] if k >= 0 else None
