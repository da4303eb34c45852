"""Judging at RL scale: fresh tasks x labelled samples through the judge service, per concurrency.

Replays an RL batch (`benchmarks/rl_workload.py`): T fresh tasks x G samples per task, about 70 %
honest kernels of varied speed, 20 % wrong, 5 % crashing and 5 % hanging, each sample a new
build. For each concurrency level C the batch goes through `make_service("local", config,
workers=C)` (what a trainer calls: C judgements in flight, `submit` blocking beyond that), and
the level reports judged solutions per minute, p50/p95/max latency per label, time per judge
stage (`Verdict.stage_times_s`), the GPU busy fraction (NVML, cuda only), the host's CPU busy
fraction (/proc/stat) and each worker role's CPU seconds, whether every verdict
matched its label (honest -> accept, others -> reject), and what was left behind: judge worker
processes and /dev/shm/cuda_gym* files.

Cold by default: every level judges its own tasks and samples with a fresh cache directory
(CUDA_GYM_CACHE) under the output's directory. `--warm`: one cache, one batch for every level,
judged once before the first level. The isolation check (skip: `--skip-isolation`) times an
honest judgement alone, then beside a hanging kernel (acceptance: at most 2x). A level stopped
by SIGTERM or Ctrl-C (`timeout`) writes what had ended, marked partial, before it exits.

    python -m benchmarks.rl_load --device cpu --tasks 3 --samples 4 --levels 4 12 \
        --out benchmarks/results/rl_load_cpu.json
    python -m benchmarks.rl_load --device cuda --tasks 32 --samples 8 \
        --out benchmarks/results/rl_load_h200.json
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import gate_trace
from benchmarks.rl_workload import (
    BASES,
    DEFAULT_MIX,
    LABELS,
    STYLES,
    Sample,
    fresh_task,
    make_batch,
    salt_of,
    solution_files,
)
from cuda_gym.cache_dir import CACHE_ENV
from cuda_gym.judge import JudgeConfig
from cuda_gym.judge.device import device_info, resolve_device
from cuda_gym.runtime.device_gate import PREFIX, TRACE_ENV, gate_dir
from cuda_gym.runtime.fork_server import close_shared_fork_servers
from cuda_gym.runtime.zygote import close_shared_launchers
from cuda_gym.service import make_service

SHM = Path("/dev/shm")
SHM_PREFIX = "cuda_gym"
NVML_PERIOD_S = 0.25
PHASES = ("setup", "trials", "repeat", "timing", "recheck")  # CandidateResult.device_memory


def parse_mix(text: str) -> dict[str, float]:
    """ "honest=0.7,wrong=0.2,crash=0.05,hang=0.05" -> {label: share}."""
    mix = {}
    for part in text.split(","):
        label, _, share = part.partition("=")
        if label.strip() not in LABELS or not share:
            raise argparse.ArgumentTypeError(f"mix entries are LABEL=SHARE with LABEL in {LABELS}")
        mix[label.strip()] = float(share)
    return mix


def spread(values: list[float]) -> dict:
    """n, p50, p95 (nearest rank) and max of `values`, in seconds rounded to 0.01."""
    xs = sorted(values)
    if not xs:
        return {"n": 0, "p50": None, "p95": None, "max": None}

    def rank(q: float) -> float:
        return round(xs[max(0, math.ceil(q * len(xs)) - 1)], 2)

    return {"n": len(xs), "p50": rank(0.5), "p95": rank(0.95), "max": round(xs[-1], 2)}


class GpuSampler:
    """Samples NVML's utilisation (share of time a kernel ran) of every visible GPU, and memory.

    Memory: the device memory in use (NVML, every process) beside what the judges hold in the
    memory ledger (cuda_gym.runtime.device_gate.MemoryLedger) at the same moment, summed over
    the visible GPUs: how much of what the reservations promise is really used.

    `busy_fraction()` is the mean over samples and GPUs, or None where NVML is not available
    (nvidia-ml-py not installed, no driver, or the cpu device).
    """

    def __init__(self, device: str) -> None:
        self.error: str | None = None
        self._handles: list = []
        self._samples: list[list[int]] = []
        self._memory: list[tuple[int, int]] = []  # (bytes used, bytes held in the ledger)
        self._total = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if device != "cuda":
            self.error = "cpu device"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            count = pynvml.nvmlDeviceGetCount()
            ids = [int(g) for g in visible.split(",") if g.strip()] if visible else range(count)
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in ids]
            self._total = sum(pynvml.nvmlDeviceGetMemoryInfo(h).total for h in self._handles)
            self._nvml = pynvml
        except Exception as exc:  # optional measurement: report why it is missing
            self.error = f"NVML unavailable: {exc}"

    def __enter__(self) -> GpuSampler:
        if self._handles:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(NVML_PERIOD_S):
            get = self._nvml.nvmlDeviceGetUtilizationRates
            self._samples.append([get(h).gpu for h in self._handles])
            used = sum(self._nvml.nvmlDeviceGetMemoryInfo(h).used for h in self._handles)
            self._memory.append((used, ledger_held()))

    def report(self) -> dict:
        """{"busy_fraction", "per_gpu", "samples", "error"}."""
        if not self._samples:
            return {"busy_fraction": None, "per_gpu": None, "samples": 0, "error": self.error}
        per_gpu = [sum(col) / len(col) / 100 for col in zip(*self._samples)]
        gib = 1 << 30
        held = [(u, h) for u, h in self._memory if h > 0]
        return {
            "busy_fraction": round(sum(per_gpu) / len(per_gpu), 3),
            "per_gpu": [round(x, 3) for x in per_gpu],
            "samples": len(self._samples),
            "error": None,
            "memory_gib": {
                "total": round(self._total / gib, 1),
                "used": spread([u / gib for u, _ in self._memory]),
                "held": spread([h / gib for _, h in self._memory]),
                # while anything is held: what is used per byte held (contexts of idle
                # workers included in "used"; < 1: the reservations are looser than the use)
                "used_per_held": spread([u / h for u, h in held]),
            },
        }


def ledger_held() -> int:
    """Bytes the judges hold in every device's memory ledger now (live holders only)."""
    total = 0
    for path in gate_dir().glob(f"{PREFIX}*.memory"):
        try:
            with open(path, "rb") as f:
                fcntl.flock(f, fcntl.LOCK_SH)
                state = json.loads(f.read() or b"{}")
        except (OSError, ValueError):
            continue
        for pid, nbytes in (state.get("held") or {}).items():
            if Path(f"/proc/{pid}").exists():
                total += int(nbytes)
    return total


def program_of(pid: int, comm: str, cmdline: str) -> str:
    """What a process is, for the CPU split: a compiler's name, or a Python process's role."""
    if not comm.startswith("python") and "python" not in cmdline.split(" ", 1)[0]:
        return comm
    if pid == os.getpid():
        return "python: this process (service, judge threads)"
    if "runner.py prebuild" in cmdline:
        return "python: build stage (imports model_new.py)"
    if "runner.py" in cmdline or "cuda_gym.runtime.fork_server" in cmdline:
        # (a runner forked by the fork server shows the server's command line)
        return "python: runner (candidate or reference code)"
    if "cuda_gym.runtime.zygote" in cmdline or "cuda_gym.judge" in cmdline:
        return "python: judge workers (drivers, probe, baselines)"
    if "_inductor" in cmdline or "compile_worker" in cmdline:
        return "python: torch.compile workers"
    return "python: other"


class ProgramCpu:
    """Host CPU seconds by program (compilers by name, Python processes by role), from /proc.

    Each `tick()` reads every process's utime+stime; a process's growth since it was last seen
    is its program's. What a process spends after the last tick before it exits is not seen
    (at most one tick's worth each), so the totals are a floor.
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[int, str], tuple[str, int]] = {}  # (pid, start) -> (program, ticks)
        self.seconds: dict[str, float] = {}
        self._hz = os.sysconf("SC_CLK_TCK")

    def tick(self) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                comm = stat[stat.index("(") + 1 : stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2 :].split()
                used, start = int(fields[11]) + int(fields[12]), fields[19]
                key = (int(entry.name), start)
                if key in self._seen:
                    program, before = self._seen[key]
                else:
                    cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                    program, before = program_of(key[0], comm, cmdline), 0
            except (OSError, ValueError, IndexError):
                continue
            if used > before:
                self.seconds[program] = self.seconds.get(program, 0.0) + (used - before) / self._hz
            self._seen[key] = (program, used)

    def report(self, top: int = 14) -> dict:
        """{program: CPU seconds} for the `top` programs, largest first, and the rest summed."""
        ordered = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        report = {name: round(sec, 1) for name, sec in ordered[:top]}
        if len(ordered) > top:
            report["(others)"] = round(sum(sec for _, sec in ordered[top:]), 1)
        return report


class CpuSampler:
    """The host's CPU busy fraction while judging, from /proc/stat (Linux), and its split.

    `report()`: the mean over the level, the p50/p95 of 1 s intervals and the share of
    intervals at least 90 % busy (the host, not the device, bounding the rate), and the CPU
    seconds by program (`ProgramCpu`, read every 0.5 s).
    """

    PERIOD_S = 1.0
    PROGRAM_PERIOD_S = 0.5

    def __init__(self) -> None:
        self._intervals: list[float] = []
        self._programs = ProgramCpu()
        self._first = self._last = self._read()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _read() -> tuple[int, int] | None:
        """(busy, total) jiffies of all CPUs, or None without /proc/stat."""
        try:
            fields = Path("/proc/stat").read_text().splitlines()[0].split()
        except (OSError, IndexError):
            return None
        values = [int(v) for v in fields[1:9]]
        idle = values[3] + values[4]  # idle, iowait
        return sum(values) - idle, sum(values)

    @staticmethod
    def _busy(a: tuple[int, int], b: tuple[int, int]) -> float | None:
        total = b[1] - a[1]
        return (b[0] - a[0]) / total if total > 0 else None

    def __enter__(self) -> CpuSampler:
        if self._first is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._end = self._read()

    def _run(self) -> None:
        self._programs.tick()  # the processes already running: what they spend from now on
        self._programs.seconds.clear()
        ticks = 0
        while not self._stop.wait(self.PROGRAM_PERIOD_S):
            self._programs.tick()
            ticks += 1
            if ticks % round(self.PERIOD_S / self.PROGRAM_PERIOD_S):
                continue
            now = self._read()
            busy = self._busy(self._last, now) if now and self._last else None
            if busy is not None:
                self._intervals.append(busy)
            self._last = now

    def report(self) -> dict:
        """{"busy_fraction", "interval_p50", "interval_p95", "saturated_share", "cores"}."""
        end = getattr(self, "_end", None)
        if self._first is None or end is None or not self._intervals:
            return {"busy_fraction": None, "error": "no /proc/stat samples"}
        ordered = sorted(self._intervals)
        return {
            "busy_fraction": round(self._busy(self._first, end) or 0.0, 3),
            "interval_p50": round(ordered[len(ordered) // 2], 3),
            "interval_p95": round(ordered[min(len(ordered) - 1, (95 * len(ordered)) // 100)], 3),
            "saturated_share": round(sum(x >= 0.9 for x in ordered) / len(ordered), 3),
            "cores": os.cpu_count(),
            "by_program_s": self._programs.report(),
        }


def _processes() -> dict[int, tuple[int, str, str]]:
    """Every process we can see: pid -> (parent pid, command line, working directory)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:
                cwd = ""
            found[int(entry.name)] = (ppid, cmdline, cwd)
        except (OSError, ValueError):
            continue
    return found


def leftovers(since: float) -> dict:
    """Judge processes and /dev/shm files this process left behind.

    processes: descendants of this process other than its zygote and fork servers (a forked
    worker shows its server's command line, so it is told apart by its parent), plus any process of
    ours whose working directory is one of this process's judge scratch directories (a worker
    that escaped its process group). zygotes: the warm zygote servers (kept by design until
    `close_shared_launchers`). shm: this process's /dev/shm/cuda_gym* entries (the judge names
    them with its pid) made since `since`, except its arena files (a pool reused by every
    judgement, removed at exit), counted apart; so are new entries of other processes (on a
    shared machine, other users' judges; on a dedicated one, worth a look).
    """
    me = os.getpid()
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    servers = ("cuda_gym.runtime.zygote", "cuda_gym.runtime.fork_server")
    zygotes = [p for p in children.get(me, []) if any(s in procs[p][1] for s in servers)]
    stack, descendants = list(children.get(me, [])), []
    while stack:
        pid = stack.pop()
        descendants.append(pid)
        stack += children.get(pid, [])
    scratch = [
        str(Path(d) / f"cuda_gym_{kind}_{me}_")
        for d in {str(SHM), tempfile.gettempdir()}
        for kind in ("judge", "probe")
    ]
    # Python's own helper (multiprocessing's resource tracker) is not a judge process.
    helpers = {p for p in descendants if "multiprocessing.resource_tracker" in procs[p][1]}
    stray = {p for p in descendants if p not in zygotes and p not in helpers}
    stray |= {p for p, (_, _, cwd) in procs.items() if cwd.startswith(tuple(scratch))}
    shm, arenas, other = [], 0, 0
    if SHM.is_dir():
        for path in SHM.glob(f"{SHM_PREFIX}*"):
            try:
                if path.stat().st_mtime < since - 1.0:  # tmpfs times are coarser than time()
                    continue
            except OSError:
                continue
            if path.name.startswith(f"cuda_gym_arena_{me}_"):
                arenas += 1
            elif f"_{me}_" in path.name:
                shm.append(path.name)
            else:
                other += 1
    return {
        "processes": [f"{p}: {procs[p][1][:120]}" for p in sorted(stray) if p in procs],
        "zygotes": len(zygotes),
        "shm": sorted(shm),
        "arena_files": arenas,
        "shm_new_of_other_processes": other,
    }


def judge_batch(
    config: JudgeConfig,
    batch: list[Sample],
    concurrency: int,
    budget_s: float | None = None,
    timed_slots: int | None = None,
    on_cut=None,
) -> dict:
    """Judge `batch` with `concurrency` judgements in flight; per-sample records and timings.

    `timed_slots` replaces the device's default number of timed judge slots.

    With `budget_s`, no sample is submitted after that many seconds (those in flight finish);
    the records then cover the submitted samples only.

    `on_cut(run)`: called with what has finished (this function's result with the finished
    judgements' records only, plus "in_flight") when a KeyboardInterrupt (main turns `timeout`'s
    SIGTERM into one) stops the run, before the service would wait for those in flight.
    """
    records: list[dict] = [
        {"index": s.index, "label": s.label, "latency_s": None, "verdict": None, "matched": False}
        for s in batch
    ]  # each replaced when its judgement ends
    submitted = 0
    finished = [0]
    lock = threading.Lock()
    started = time.monotonic()
    with (
        GpuSampler(config.device) as gpu,
        CpuSampler() as cpu,
        make_service(
            "local", config, workers=concurrency, max_pending=concurrency, timed_slots=timed_slots
        ) as service,
    ):
        futures = []
        cut = _Cut(on_cut, gpu, cpu, lambda: _finished(records, submitted, lock), started)
        with cut:
            for sample in batch:
                if budget_s is not None and time.monotonic() - started > budget_s:
                    break
                future = service.submit(sample.task, sample.files)  # blocks while C in flight
                submitted += 1
                accepted = time.monotonic()

                def done(f, sample=sample, accepted=accepted) -> None:
                    record = {
                        "index": sample.index,
                        "task": sample.task.task_id,
                        "label": sample.label,
                        "variant": sample.variant,
                        "style": sample.style,
                        "expected": sample.expected,
                        "latency_s": round(time.monotonic() - accepted, 3),
                        "finished_at_s": round(time.monotonic() - started, 3),
                    }
                    error = f.exception()
                    if error is not None:  # infrastructure failure: no verdict, a lost judgement
                        record.update(verdict=None, matched=False, infra_error=repr(error)[:500])
                    else:
                        v = f.result()
                        record.update(
                            verdict=v.verdict,
                            matched=v.verdict == sample.expected,
                            reward=v.reward,
                            stage=v.stage,
                            judge_s=round(v.duration_s, 3),
                            speedup_vs_eager=v.speedup_vs_eager,
                            error=(v.error or "")[:300] or None,
                            stage_times_s={k: round(s, 3) for k, s in v.stage_times_s.items()},
                            worker_cpu_s=dict(v.flags.get("worker_cpu_s") or {}),
                            device_gib=device_gib(v.flags),
                            retried_alone=bool(v.flags.get("retried_alone_after_oom")),
                            device_phases=device_phases(v.flags),
                        )
                    infra = record.get("infra_error")
                    with lock:
                        records[sample.index] = record
                        finished[0] += 1
                        stages = record.get("stage_times_s") or {}
                        top = sorted(stages.items(), key=lambda kv: -kv[1])[:7]
                        print(
                            f"  [{finished[0]}/{len(batch)}] {sample.label:<6} {sample.style:<6}"
                            f" -> {record.get('verdict')} in {record['latency_s']} s"
                            f" at {record['finished_at_s']:.0f} s"
                            f" ({', '.join(f'{k} {v:.1f}' for k, v in top)})"
                            f"{' ' + infra[:200] if infra else ''}",
                            flush=True,
                        )

                future.add_done_callback(done)
                futures.append(future)
            for future in futures:
                future.exception()  # wait for every judgement
    elapsed = time.monotonic() - started
    return {
        "records": records[:submitted],
        "started": started,
        "elapsed_s": elapsed,
        "gpu": gpu.report(),
        "cpu": cpu.report(),
    }


def _finished(records: list[dict], submitted: int, lock: threading.Lock) -> tuple[list, int]:
    """Copies of the records of the judgements that have ended, and how many are in flight."""
    with lock:
        done = [dict(r) for r in records[:submitted] if "finished_at_s" in r]
    return done, submitted - len(done)


class _Cut:
    """Turns a KeyboardInterrupt inside its block into `on_cut(partial run)` first.

    `timeout` stops a long run with SIGTERM (main makes it a KeyboardInterrupt); the judgements
    in flight then take minutes to end, and the service would wait for them before any report
    is written. What has finished is handed over here, while the samplers are stopped.
    """

    def __init__(self, on_cut, gpu: GpuSampler, cpu: CpuSampler, finished, started: float):
        self.on_cut, self.gpu, self.cpu = on_cut, gpu, cpu
        self.finished, self.started = finished, started

    def __enter__(self) -> _Cut:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is not KeyboardInterrupt or self.on_cut is None:
            return
        self.gpu.__exit__(None, None, None)
        self.cpu.__exit__(None, None, None)
        done, in_flight = self.finished()
        self.on_cut(
            {
                "records": done,
                "in_flight": in_flight,
                "started": self.started,
                "elapsed_s": time.monotonic() - self.started,
                "gpu": self.gpu.report(),
                "cpu": self.cpu.report(),
            }
        )


def device_gib(flags: dict) -> dict | None:
    """CUDA: a judgement's reservation in the GPU memory ledger, its driver's peak, and what
    its driver and runners used together (NVML), GiB."""
    reserved = flags.get("device_bytes_reserved")
    peak = (flags.get("device_peak_bytes") or {}).get("candidate") or {}
    if reserved is None and not peak:
        return None
    gib = 1 << 30
    used = flags.get("device_bytes_used")
    return {
        "reserved": round(reserved / gib, 3) if reserved is not None else None,
        "driver_peak": round(peak["reserved"] / gib, 3) if "reserved" in peak else None,
        "used": round(used / gib, 3) if used is not None else None,
    }


def device_phases(flags: dict) -> dict | None:
    """CUDA: the driver's PyTorch memory at the end of each phase, GiB (peak so far, held)."""
    phases = flags.get("device_memory_by_phase")
    if not phases:
        return None
    gib = 1 << 30
    return {
        name: {"peak": round(m["peak"] / gib, 3), "allocated": round(m["allocated"] / gib, 3)}
        for name, m in phases.items()
    }


def phase_spreads(records: list[dict | None]) -> dict:
    """{phase: {"peak": spread, "allocated": spread}} over the judgements' `device_phases`."""
    measured = [p for p in records if p]
    return {
        phase: {
            key: spread([p[phase][key] for p in measured if phase in p])
            for key in ("peak", "allocated")
        }
        for phase in PHASES
    }


def summarise(concurrency: int, batch: list[Sample], run: dict) -> dict:
    """One level's summary from `judge_batch`'s result."""
    records, elapsed = run["records"], run["elapsed_s"]
    total, batch = len(batch), batch[: len(records)]  # the samples submitted within the budget
    judged = [r for r in records if r.get("verdict") is not None]
    stages: dict[str, list[float]] = {}
    worker_cpu: dict[str, list[float]] = {}
    for r in judged:
        for stage, seconds in r["stage_times_s"].items():
            stages.setdefault(stage, []).append(seconds)
        for role, seconds in (r.get("worker_cpu_s") or {}).items():
            worker_cpu.setdefault(role, []).append(seconds)
    return {
        "concurrency": concurrency,
        "samples": len(batch),
        "not_submitted": total - len(batch),
        "tasks": len({s.task.task_id for s in batch}),
        "labels": {k: sum(s.label == k for s in batch) for k in LABELS},
        "styles": {k: sum(s.style == k for s in batch) for k in STYLES},
        "elapsed_s": round(elapsed, 2),
        "judged": len(judged),
        "lost": len(records) - len(judged),
        "judged_per_min": round(60 * len(judged) / elapsed, 2),
        # Judgements finished by each minute of the level (cold caches fill in the first ones).
        "judged_by_s": {
            t: sum(r.get("finished_at_s", elapsed) <= t for r in judged)
            for t in range(60, int(elapsed) + 60, 60)
        },
        "all_as_labelled": all(r["matched"] for r in records),
        "mismatches": [r for r in records if not r["matched"]],
        "latency_s": {
            k: spread([r["latency_s"] for r in judged if r["label"] == k]) for k in LABELS
        },
        # The judgement itself (Verdict.duration_s), with its waits for build and device slots
        # (stage_s "wait.build", "wait.slot").
        "judge_s": {k: spread([r["judge_s"] for r in judged if r["label"] == k]) for k in LABELS},
        "stage_s": {
            stage: {**spread(xs), "total": round(sum(xs), 2)}
            for stage, xs in sorted(stages.items())
        },
        "gpu": run["gpu"],
        "cpu": run.get("cpu"),
        # The device's time at its gate (benchmarks/gate_trace.py): held alone, drained, ...
        "gate": _gate_summary(run),
        # Host CPU seconds of each worker role with its runners (Flag.WORKER_CPU_S); builds,
        # which run outside the workers, are in the host's busy fraction only.
        "worker_cpu_s": {
            role: {**spread(xs), "total": round(sum(xs), 2)}
            for role, xs in sorted(worker_cpu.items())
        },
        # CUDA: GiB each judgement reserved in the memory ledger, its driver's peak (PyTorch's
        # count), and what its driver and runners used (NVML): how far reservations bound.
        "device_gib": {
            key: spread([g[key] for r in judged if (g := r.get("device_gib")) and g.get(key)])
            for key in ("reserved", "driver_peak", "used")
        },
        # CUDA: the driver's memory at the end of each phase (peak so far, and held), GiB
        "device_phases_gib": phase_spreads([r.get("device_phases") for r in judged]),
        # judgements that ran out of device memory beside others and were judged again alone
        "retried_alone_after_oom": sum(1 for r in judged if r.get("retried_alone")),
        "records": records,
    }


def _gate_summary(run: dict) -> dict | None:
    """The level's gate trace (the file CUDA_GYM_GATE_TRACE names) over its judging window."""
    path = os.environ.get(TRACE_ENV)
    if not path or not Path(path).is_file() or "started" not in run:
        return None
    events = gate_trace.read(Path(path))
    return gate_trace.summarise(events, run["started"], run["started"] + run["elapsed_s"])


def isolation(config: JudgeConfig, style: str, seed: int) -> dict:
    """An honest judgement alone, then beside a hanging kernel (acceptance: at most 2x).

    One fresh task, probed and baselined by a first honest judgement; then a second honest
    sample alone; then a hanging sample and, after a head start of the honest build time (so
    it has built and starts spinning), a third honest sample. Every sample is a new build.
    "valid" says whether the hang was still being judged when the third one began.
    """
    device = config.device
    base = BASES[0]
    task = fresh_task(base, 0, device, salt_of(seed, "isolation", "task"))

    def files(kind: str, n: int) -> dict[str, bytes]:
        return solution_files(base, device, kind, style, salt_of(seed, "isolation", kind, n))

    with make_service("local", config, workers=2, max_pending=2) as service:
        first = service.evaluate(task, files("fast", 0))
        start = time.monotonic()
        alone = service.evaluate(task, files("fast", 1))
        alone_s = time.monotonic() - start
        # Long enough for the hang to build (as long as the honest build took) and start, short
        # enough that it is still spinning when the honest judgement runs.
        head_start_s = min(alone.stage_times_s.get("build", 0.0) + 2.0, config.run_timeout_s / 4)
        hang = service.submit(task, files("hang", 0))
        hang_end: list[float] = []
        hang.add_done_callback(lambda _f: hang_end.append(time.monotonic()))
        time.sleep(head_start_s)
        start = time.monotonic()
        beside = service.evaluate(task, files("fast", 2))
        beside_s = time.monotonic() - start
        hang_verdict = hang.result()
    # The measurement holds only if the hang was still being judged when the honest one began.
    overlap_s = (hang_end[0] if hang_end else time.monotonic()) - start
    return {
        "style": style,
        "first_s": round(first.duration_s, 2),
        "alone_s": round(alone_s, 2),
        "beside_hang_s": round(beside_s, 2),
        "ratio": round(beside_s / alone_s, 2),
        "within_2x": beside_s <= 2 * alone_s,
        "head_start_s": round(head_start_s, 2),
        "hang_overlapped_s": round(overlap_s, 2),
        "valid": overlap_s > 0,
        "verdicts": {
            "first": first.verdict,
            "alone": alone.verdict,
            "beside": beside.verdict,
            "hang": hang_verdict.verdict,
        },
        "hang_judge_s": round(hang_verdict.duration_s, 2),
        "as_labelled": [first.verdict, alone.verdict, beside.verdict, hang_verdict.verdict]
        == ["accept", "accept", "accept", "reject"],
    }


def print_level(level: dict) -> None:
    """One line per level, then its slowest stages."""
    lat = level["latency_s"]
    busy = level["gpu"]["busy_fraction"]
    cells = "  ".join(
        f"{k} {lat[k]['p50']}/{lat[k]['p95']}/{lat[k]['max']}" for k in LABELS if lat[k]["n"]
    )
    print(
        f"C={level['concurrency']:<3} n={level['samples']:<4} {level['judged_per_min']:>7.2f}/min "
        f"labelled={'yes' if level['all_as_labelled'] else 'NO'} lost={level['lost']} "
        f"gpu_busy={busy}  latency s p50/p95/max: {cells}"
    )
    top = sorted(level["stage_s"].items(), key=lambda kv: -kv[1]["total"])[:8]
    print(
        "      stages (total s, p50/p95): "
        + ", ".join(f"{k} {v['total']} ({v['p50']}/{v['p95']})" for k, v in top)
    )
    cpu = level.get("cpu") or {}
    roles = level.get("worker_cpu_s") or {}
    print(
        f"      host cpu busy {cpu.get('busy_fraction')} (1 s intervals: p50"
        f" {cpu.get('interval_p50')}, >= 90 % busy {cpu.get('saturated_share')});"
        " worker cpu s (total, p50): "
        + ", ".join(
            f"{k} {v['total']} ({v['p50']})"
            for k, v in sorted(roles.items(), key=lambda kv: -kv[1]["total"])[:12]
        )
    )
    programs = cpu.get("by_program_s") or {}
    if programs:
        print("      host cpu s by program: " + ", ".join(f"{k} {v}" for k, v in programs.items()))
    gib = level.get("device_gib") or {}
    if any(v.get("n") for v in gib.values()):
        print(
            "      device GiB per judgement (p50/max): "
            + ", ".join(f"{k} {v['p50']}/{v['max']}" for k, v in gib.items() if v.get("n"))
        )
    phases = level.get("device_phases_gib") or {}
    if any(v["peak"].get("n") for v in phases.values()):
        print(
            "      driver GiB at the end of each phase (peak so far p50/max; held p50): "
            + ", ".join(
                f"{k} {v['peak']['p50']}/{v['peak']['max']}; {v['allocated']['p50']}"
                for k, v in phases.items()
                if v["peak"].get("n")
            )
        )
    memory = (level.get("gpu") or {}).get("memory_gib")
    if memory and memory["used"].get("n"):
        print(
            f"      device memory GiB of {memory['total']} (p50/p95/max): used"
            f" {memory['used']['p50']}/{memory['used']['p95']}/{memory['used']['max']}, held in"
            f" the ledger {memory['held']['p50']}/{memory['held']['p95']}/{memory['held']['max']};"
            f" used per held {memory['used_per_held']['p50']}/{memory['used_per_held']['p95']}"
            f"/{memory['used_per_held']['max']}; reruns alone after OOM"
            f" {level.get('retried_alone_after_oom')}"
        )
    gate = level.get("gate")
    if gate and gate.get("events"):
        print(
            "      gate (share of the window): "
            + ", ".join(f"{k} {v}" for k, v in gate["fraction"].items())
            + f"; kept out {gate['kept_out_s']} process-s; alone by stage"
            f" {gate['alone_by_stage']}; drains wait for {gate['drain_by_stage']}"
        )
    left = level.get("leftovers") or {"processes": [], "shm": []}
    if left["processes"] or left["shm"]:
        print(f"      LEFT BEHIND: {left['processes']} {left['shm']}")


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    p.add_argument("--tasks", type=int, default=32, help="fresh tasks per level (T)")
    p.add_argument("--samples", type=int, default=8, help="samples per task (G)")
    p.add_argument("--levels", type=int, nargs="*", default=[8, 32, 64], help="concurrency")
    p.add_argument(
        "--mix",
        type=parse_mix,
        default=DEFAULT_MIX,
        help="label shares, e.g. honest=0.7,wrong=0.2,crash=0.05,hang=0.05",
    )
    p.add_argument("--styles", nargs="+", default=list(STYLES), choices=STYLES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--budget-s",
        type=float,
        help="per level: submit no sample after this many seconds (those in flight finish)",
    )
    p.add_argument("--warm", action="store_true", help="judge the batch once before the levels")
    p.add_argument("--skip-isolation", action="store_true")
    p.add_argument("--isolation-style", default="plain", choices=STYLES)
    p.add_argument("--work-dir", help="where the cache directories go (default: $TMPDIR)")
    p.add_argument("--keep-cache", action="store_true", help="keep the caches after the run")
    p.add_argument(
        "--timed-slots", type=int, help="timed judge slots (default: 8 per GPU, 1 per CPU core)"
    )
    p.add_argument("--run-timeout-s", type=float, help="JudgeConfig.run_timeout_s")
    p.add_argument("--timed-runs", type=int, help="JudgeConfig.timed_runs")
    p.add_argument("--warmup-runs", type=int, help="JudgeConfig.warmup_runs")
    p.add_argument("--correctness-trials", type=int, help="JudgeConfig.correctness_trials")
    p.add_argument("--baselines", nargs="+", choices=("eager", "compile"))
    p.add_argument(
        "--memory-per-step", action="store_true", help="JudgeConfig.memory_per_step (CUDA)"
    )
    p.add_argument("--memory-share", type=float, help="JudgeConfig.memory_share (CUDA)")
    p.add_argument("--out", default="benchmarks/results/rl_load.json")
    return p


def judge_config(args: argparse.Namespace, device: str, cache: Path) -> JudgeConfig:
    """JudgeConfig's defaults, with the flags given and the cache directory."""
    overrides = {
        "run_timeout_s": args.run_timeout_s,
        "timed_runs": args.timed_runs,
        "warmup_runs": args.warmup_runs,
        "correctness_trials": args.correctness_trials,
        "baselines": tuple(args.baselines) if args.baselines else None,
        "memory_per_step": True if args.memory_per_step else None,
        "memory_share": args.memory_share,
    }
    given = {k: v for k, v in overrides.items() if v is not None}
    return JudgeConfig(device=device, cache_dir=cache, **given)


def use_cache(cache: Path) -> None:
    """Point this process and its children at `cache` (a fresh directory for a cold level)."""
    cache.mkdir(parents=True, exist_ok=True)
    os.environ[CACHE_ENV] = str(cache)
    close_shared_launchers()  # zygotes carry the old cache in their environment
    close_shared_fork_servers()


def main(argv: list[str] | None = None) -> dict:
    """Run the levels (and the isolation check); print a table and write the JSON summary."""
    args = build_parser().parse_args(argv)
    # `timeout` stops a run with SIGTERM: as Ctrl-C, so that a level cut short still reports.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    device = resolve_device(args.device)
    out = Path(args.out)
    work = (
        Path(args.work_dir or tempfile.gettempdir()) / f"rl_load_{os.getpid()}_{int(time.time())}"
    )
    report = {
        "benchmark": "rl_load",
        "command": " ".join(["python -m benchmarks.rl_load", *(argv or sys.argv[1:])]),
        "device": device_info(device).to_dict(),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "api": "cuda_gym.service.make_service('local', config, workers=C, max_pending=C)",
        "tasks": args.tasks,
        "samples_per_task": args.samples,
        "mix": args.mix,
        "styles": args.styles,
        "seed": args.seed,
        "cache": "warm" if args.warm else "cold (a fresh cache directory per level)",
        "work_dir": str(work),
        "levels": [],
    }
    config = judge_config(args, device, work / "warm")
    report["judge_config"] = {k: str(v) for k, v in vars(config).items() if k != "cache_dir"}
    report["timed_slots"] = args.timed_slots or "default"

    def batch_for(salt: str) -> list[Sample]:
        styles = tuple(args.styles)
        return make_batch(
            args.tasks, args.samples, device, mix=args.mix, styles=styles, seed=args.seed, salt=salt
        )

    if args.warm:
        use_cache(work / "warm")
        batch = batch_for("warm")
        priming = judge_batch(config, batch, max(args.levels or [8]), timed_slots=args.timed_slots)
        report["priming_s"] = round(priming["elapsed_s"], 2)
    for level in args.levels:
        # The gate's transitions of this level's workers (started after use_cache, below).
        os.environ[TRACE_ENV] = str(work / f"gate_trace_level{level}.txt")
        if not args.warm:
            config = judge_config(args, device, work / f"level{level}")
            use_cache(config.cache_dir)
            batch = batch_for(f"level{level}")
        since = time.time()

        def write_partial(run: dict, level=level, batch=batch) -> None:
            summary = summarise(level, batch, run)
            summary["status"] = (
                "partial: stopped by a signal (SIGTERM/SIGINT) with judgements in flight; the "
                "figures cover those that had ended"
            )
            summary["in_flight_when_stopped"] = run["in_flight"]
            ended = run["records"]
            summary["labels"] = {k: sum(r["label"] == k for r in ended) for k in LABELS}
            summary["styles"] = {k: sum(r["style"] == k for r in ended) for k in STYLES}
            report["levels"].append(summary)
            write_report(report, out)
            print_level(summary)
            print(f"stopped: wrote {out}", flush=True)
            os._exit(124)

        judged = judge_batch(
            config,
            batch,
            level,
            args.budget_s,
            timed_slots=args.timed_slots,
            on_cut=write_partial,
        )
        summary = summarise(level, batch, judged)
        summary["leftovers"] = leftovers(since)
        close_shared_launchers()
        close_shared_fork_servers()
        time.sleep(1.0)  # let the zygotes' process groups exit
        summary["leftovers_after_zygotes_closed"] = leftovers(since)["processes"]
        print_level(summary)
        report["levels"].append(summary)
        if not (args.warm or args.keep_cache):
            shutil.rmtree(config.cache_dir, ignore_errors=True)  # builds of a cold level: GiBs
        write_report(report, out)  # after every level: a run cut short keeps what it measured
    os.environ.pop(TRACE_ENV, None)
    if not args.skip_isolation:
        cache = work / "isolation"
        use_cache(cache)
        config = judge_config(args, device, cache)
        report["isolation"] = isolation(config, args.isolation_style, args.seed)
        iso = report["isolation"]
        print(
            f"isolation ({iso['style']}): honest alone {iso['alone_s']} s, beside a hang "
            f"{iso['beside_hang_s']} s (x{iso['ratio']}, within 2x: {iso['within_2x']}, "
            f"overlapping the hang: {iso['valid']}); "
            f"verdicts as labelled: {iso['as_labelled']}"
        )
    if not args.keep_cache:
        shutil.rmtree(work, ignore_errors=True)
    write_report(report, out)
    print(f"wrote {out}")
    return report


def write_report(report: dict, out: Path) -> None:
    """Write the JSON summary (atomically)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(out)


if __name__ == "__main__":
    main()
