"""Time and profile a callable on the GPU (CUDA events, L2 flushed) or the CPU (wall clock).

Runs inside judge worker processes. The same function times the candidate and both baselines,
so their numbers are comparable.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from time import perf_counter  # bound at import, before any candidate code runs

import torch

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2 (H200: 60 MB)


class Timer:
    """Times calls of a function with fresh clones of its inputs for every call."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._flush = None
        if device == "cuda":
            self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def time_ms(
        self, fn: Callable, input_sets: Sequence[Sequence], warmup_runs: int, timed_runs: int
    ) -> tuple[dict[str, float], int, object]:
        """Median and spread of `timed_runs` calls after `warmup_runs` identical untimed ones.

        Call k gets fresh clones of `input_sets[k % len(input_sets)]`, so warm-up and timed
        calls look alike and no call sees the same tensors twice. On CUDA every call is
        bracketed by device-wide synchronisation (work on any stream is counted) and preceded
        by an L2 flush; the host wall-clock of each call is kept beside the CUDA-event time.

        Returns:
            ({"median_ms", "mean_ms", "min_ms", "max_ms", "host_median_ms", "runs"},
            index of the input set of the last call, output of the last call).
        """
        device_ms: list[float] = []
        host_ms: list[float] = []
        out = None
        index = 0
        for k in range(warmup_runs + timed_runs):
            index = k % len(input_sets)
            args = _clone(input_sets[index])
            if self.device == "cuda":
                self._flush.zero_()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                host_start = perf_counter()
                start.record()
                out = fn(*args)
                end.record()
                torch.cuda.synchronize()
                host = (perf_counter() - host_start) * 1e3
                dev = start.elapsed_time(end)
            else:
                host_start = perf_counter()
                out = fn(*args)
                host = dev = (perf_counter() - host_start) * 1e3
            if k >= warmup_runs:
                host_ms.append(host)
                device_ms.append(dev)
        stats = {
            "median_ms": statistics.median(device_ms),
            "mean_ms": statistics.fmean(device_ms),
            "min_ms": min(device_ms),
            "max_ms": max(device_ms),
            "host_median_ms": statistics.median(host_ms),
            "runs": timed_runs,
        }
        return stats, index, out


def _clone(inputs: Sequence) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def profile_table(
    fn: Callable, inputs: Sequence, device: str, runs: int = 3, top: int = 12
) -> tuple[str, float | None]:
    """The operators/kernels that took the most device time over `runs` calls.

    Returns:
        A text table, and on CUDA the summed GPU kernel time per call in ms (None on the CPU).
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    calls = [_clone(inputs) for _ in range(runs)]
    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for args in calls:
            with record_function("ModelNew.forward (whole call)"):
                fn(*args)
        if device == "cuda":
            torch.cuda.synchronize()
    rows = []
    for evt in prof.key_averages():
        if device == "cuda":
            total_us = getattr(evt, "self_device_time_total", 0) or 0
            if total_us <= 0 or evt.device_type != torch.autograd.DeviceType.CUDA:
                continue
        else:
            total_us = evt.self_cpu_time_total
            if total_us <= 0:
                continue
        rows.append((evt.key, evt.count, total_us / 1e3))
    if not rows:
        return "(the profiler recorded no device activity)", None
    rows.sort(key=lambda r: r[2], reverse=True)
    grand = sum(r[2] for r in rows)
    kind = "GPU kernel" if device == "cuda" else "CPU operator"
    lines = [f"{'share':>6}  {'total ms':>9}  {'calls':>5}  {kind} (over {runs} calls)"]
    for name, count, total_ms in rows[:top]:
        short = name if len(name) <= 90 else name[:87] + "..."
        lines.append(f"{100 * total_ms / grand:5.1f}%  {total_ms:9.3f}  {count:5d}  {short}")
    if len(rows) > top:
        rest = sum(r[2] for r in rows[top:])
        lines.append(f"{100 * rest / grand:5.1f}%  {rest:9.3f}  {'':5}  ({len(rows) - top} more)")
    per_call_ms = grand / runs if device == "cuda" else None
    return "\n".join(lines), per_call_ms
