"""Time and profile a callable on the GPU (CUDA events, L2 flushed) or the CPU (wall clock).

Runs inside judge worker processes. The same function times the candidate and both baselines,
so their numbers are comparable.
"""

from __future__ import annotations

import ctypes
import re
import statistics
from collections.abc import Callable, Sequence
from time import perf_counter  # bound at import, before any candidate code runs

import torch

# Larger than any current GPU's L2 (H200: 60 MB), and long enough to zero that the host has
# launched the timed call's work before the GPU reaches it.
L2_FLUSH_BYTES = 512 * 1024 * 1024
# CUDA driver API: CUlimit value of CU_LIMIT_PERSISTING_L2_CACHE_SIZE.
_CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
# Host time beyond the CUDA-event time (after removing the measured sync overhead) that means
# work ran outside the events' stream: relative and absolute slack.
SIDE_WORK_FACTOR = 1.2
SIDE_WORK_SLACK_MS = 0.02
# A flush that takes this much longer than alone (relative) shared the GPU with the call's work.
FLUSH_OVERLAP_FACTOR = 0.25
CALIBRATION_CALLS = 20
# Warm-up lasts at least this long (and at least the requested number of calls), so an idle
# GPU's clocks have ramped up before the first timed call.
WARMUP_MIN_S = 0.3


class _Driver:
    """The few CUDA driver calls the timer needs, bound to the process's current context."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            self.lib = None

    def persisting_l2_limit(self) -> int | None:
        """The context's persisting-L2 set-aside in bytes, or None if it cannot be read."""
        if self.lib is None:
            return None
        value = ctypes.c_size_t(0)
        status = self.lib.cuCtxGetLimit(ctypes.byref(value), _CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        return value.value if status == 0 else None

    def disable_persisting_l2(self) -> bool:
        """Set the persisting-L2 set-aside to 0 and demote every persisting line to normal."""
        if self.lib is None:
            return False
        set_ok = self.lib.cuCtxSetLimit(_CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(0))
        reset_ok = self.lib.cuCtxResetPersistingL2Cache()
        return set_ok == 0 and reset_ok == 0


class Timer:
    """Times calls of a function with fresh clones of its inputs for every call.

    `warmup_min_s` is the least warm-up time on CUDA (the judge keeps the default; the synth
    filters, which keep the GPU busy and only check a coarse window, use less).
    """

    def __init__(self, device: str, warmup_min_s: float = WARMUP_MIN_S) -> None:
        self.device = device
        self.warmup_min_s = warmup_min_s if device == "cuda" else 0.0
        self._flush = None
        self._driver = None
        self.persisting_l2_disabled: bool | None = None
        if device == "cuda":
            self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
            self._driver = _Driver()
            self.persisting_l2_disabled = self._driver.disable_persisting_l2()

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _timed_call(self, fn: Callable, args: Sequence) -> tuple[float, float, float, object]:
        """One call bracketed by device-wide synchronisation: (event ms, host ms, flush ms, out).

        The L2 flush is queued after the synchronisation and before the start event, so the GPU
        is busy flushing while the host launches the call's work: the event time is the GPU's
        time for the call, not the host's launch latency (Python, the fallback ban), which
        otherwise varies by tens of microseconds from process to process. The flush's own GPU
        time is returned too: work from the call that overlaps it (an unsynchronised side
        stream) makes it longer, and `time_ms` counts that.
        """
        if self.device != "cuda":
            host_start = perf_counter()
            out = fn(*args)
            host = (perf_counter() - host_start) * 1e3
            return host, host, 0.0, out
        self._driver.disable_persisting_l2()
        before = torch.cuda.Event(enable_timing=True)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        host_start = perf_counter()
        before.record()
        self._flush.zero_()
        start.record()
        out = fn(*args)
        end.record()
        torch.cuda.synchronize()
        host = (perf_counter() - host_start) * 1e3
        return start.elapsed_time(end), host, before.elapsed_time(start), out

    def _calibrate(self) -> tuple[float, float]:
        """(host-minus-event ms, flush ms) of an empty call: the bracketing's own cost (medians)."""
        gaps, flushes = [], []
        for _ in range(CALIBRATION_CALLS):
            dev, host, flush, _ = self._timed_call(lambda: None, ())
            gaps.append(host - dev)
            flushes.append(flush)
        return max(0.0, statistics.median(gaps)), statistics.median(flushes)

    def time_ms(
        self,
        fn: Callable,
        input_sets: Sequence[Sequence],
        warmup_runs: int,
        timed_runs: int,
        after_call: Callable[[], None] | None = None,
        before_call: Callable[[int], None] | None = None,
    ) -> tuple[dict, int, object]:
        """Median and spread of `timed_runs` calls after `warmup_runs` identical untimed ones.

        Call k gets fresh clones of `input_sets[k % len(input_sets)]`, so warm-up and timed
        calls look alike and no call sees the same tensors twice. On CUDA warm-up also lasts
        at least `warmup_min_s`, so the clocks of an idle GPU have ramped up; every call is
        preceded by an L2 flush with persisting-L2 lines demoted and the set-aside at 0, and is
        bracketed by device-wide synchronisation. The host wall-clock of each call is kept
        beside the CUDA-event time: when it exceeds the event time by more than the measured
        bracketing overhead allows, or when the flush before the call took longer than alone
        (work launched by the call ran beside it), work ran outside the events' stream (a side
        stream): the host figure, plus any flush excess, is the one reported, so such work is
        counted. `after_call`, if given, runs after every call, outside the measurement;
        `before_call(k)`, if given, before every call on `input_sets[k]`, outside it too.

        Returns:
            (stats, index of the input set of the last call, output of the last call). stats has
            "median_ms" (the reported time), "event_median_ms", "mean_ms", "min_ms", "max_ms",
            "host_median_ms", "sync_overhead_ms", "flush_ms" (the flush alone),
            "flush_excess_ms", "side_work", "runs" and "warmup_calls"; on CUDA also
            "persisting_l2_limit_after" (bytes; non-zero means the callee raised it) and
            "sm_clock_mhz_after" (NVML, None when unavailable).
        """
        overhead, flush_alone = self._calibrate() if self.device == "cuda" else (0.0, 0.0)
        device_ms: list[float] = []
        host_ms: list[float] = []
        flush_ms: list[float] = []
        out = None
        index = 0
        k = 0
        warm_until = perf_counter() + self.warmup_min_s
        while k < warmup_runs or perf_counter() < warm_until:
            index = k % len(input_sets)
            if before_call is not None:
                before_call(index)
            *_, out = self._timed_call(fn, _clone(input_sets[index]))
            if after_call is not None:
                after_call()
            k += 1
        warmup_calls = k
        for _ in range(timed_runs):
            index = k % len(input_sets)
            if before_call is not None:  # outside the measurement
                before_call(index)
            dev, host, flush, out = self._timed_call(fn, _clone(input_sets[index]))
            if after_call is not None:  # outside the measurement
                after_call()
            host_ms.append(host)
            device_ms.append(dev)
            flush_ms.append(flush)
            k += 1
        event_median = statistics.median(device_ms)
        host_median = statistics.median(host_ms)
        host_work = host_median - overhead
        # Work overlapping the flush (launched by the call, not ordered after the start event).
        flush_excess = statistics.median(flush_ms) - flush_alone if flush_ms else 0.0
        overlapped = flush_excess > FLUSH_OVERLAP_FACTOR * flush_alone + SIDE_WORK_SLACK_MS
        side_work = overlapped or host_work > SIDE_WORK_FACTOR * event_median + SIDE_WORK_SLACK_MS
        hidden = max(0.0, flush_excess) if overlapped else 0.0
        spread = host_ms if side_work else device_ms
        shift = (hidden - overhead) if side_work else 0.0
        stats = {
            "median_ms": max(host_work, event_median) + hidden if side_work else event_median,
            "event_median_ms": event_median,
            "mean_ms": statistics.fmean(spread) + shift,
            "min_ms": min(spread) + shift,
            "max_ms": max(spread) + shift,
            "host_median_ms": host_median,
            "sync_overhead_ms": overhead,
            "flush_ms": flush_alone,
            "flush_excess_ms": flush_excess,
            "side_work": side_work,
            "runs": timed_runs,
            "warmup_calls": warmup_calls,
        }
        if self.device == "cuda":
            # The SM clock right after the timed calls (NVML): compute-bound kernels scale with it.
            stats["sm_clock_mhz_after"] = _sm_clock_mhz()
            torch.cuda.synchronize()
            stats["persisting_l2_disabled"] = self.persisting_l2_disabled
            stats["persisting_l2_limit_after"] = self._driver.persisting_l2_limit()
        return stats, index, out


def _sm_clock_mhz() -> int | None:
    try:
        return torch.cuda.clock_rate()
    except Exception:  # NVML missing or not permitted
        return None


def _clone(inputs: Sequence) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


# Kernel names (demangled) that come from PyTorch itself or from a vendor library. Only the
# kernel's own namespace counts (a candidate kernel templated on c10::Half stays the
# candidate's); kernels in an anonymous namespace cannot be attributed and count as the
# candidate's (the dispatcher ban is the primary guard; this is the cross-check).
_PREFIX = r"^(?:void |std::enable_if<.*?>::type )?"
_TORCH_KERNEL = re.compile(_PREFIX + r"(?:at|c10|at_cuda_detail)::|^triton_(?:poi|per|red|tem)_")
_VENDOR_KERNEL = re.compile(
    _PREFIX + r"(?:cublas\w*|cudnn\w*|cutlass\w*|internal::gemvx|gemv2[NT]_kernel|gemvNSP"
    r"|splitKreduce_kernel)"
    r"|nvjet_|_xmma_|implicit_convolve_sgemm|cudnn::"
    r"|^(?:void )?(?:sm\d\d|ampere|volta|turing|hopper)_\w*(?:gemm|conv|fprop|dgrad|wgrad)"
)
_MEMORY_ACTIVITY = re.compile(r"^(Memcpy|Memset)\b")
# CuPy's own ufunc, copy and reduction kernels (`cupy_copy`, `cupy_multiply`, `cupy_sum`): a
# library's compute on arrays over the solution's tensors (`cp.ascontiguousarray` of a
# transposed view is a transpose), never the solution's, whatever the task allows. A solution's
# own CuPy kernels carry its names (RawKernel's function, ElementwiseKernel's `name`).
_LIBRARY_KERNEL = re.compile(r"^cupy_")


def kernel_origin(name: str, vendor_allowed: bool) -> str:
    """Where one kernel comes from: own, torch, vendor (a library not allowed) or memory."""
    if _MEMORY_ACTIVITY.search(name):
        return "memory"
    if _TORCH_KERNEL.search(name):
        return "torch"
    if _LIBRARY_KERNEL.search(name):
        return "vendor"
    if _VENDOR_KERNEL.search(name):
        return "own" if vendor_allowed else "vendor"
    return "own"
