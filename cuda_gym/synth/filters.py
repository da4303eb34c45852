"""Execution filters, run in a worker process: does a composed task make a good training task?

In order, each recorded with its details: `eager` (runs, finite outputs), `deterministic` (the
same input twice under different RNG seeds gives the same output), `input_sensitive` (different
inputs give different outputs), `not_degenerate` (not constant, near zero or uniform along an
axis), `time_window` (eager median inside the window; the batch size is rescaled once when it is
not), `trivial_answers` (the judge's trivial probes — zeros, the mean, an input — fail in every
precision mode), `compile` (runs under torch.compile and agrees with eager), and on CUDA
`cpu_sizes` (the task's CPU sizes run on the CPU). The first failure stops the chain.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
import types
from dataclasses import dataclass, field

import torch

from cuda_gym.errors import is_out_of_memory
from cuda_gym.judge.compare import MODES, check_outputs_match
from cuda_gym.judge.inputs import DISTRIBUTIONS, make_inputs
from cuda_gym.judge.timing import Timer
from cuda_gym.judge.trivial import trivial_answers
from cuda_gym.synth.builder import MAIN, pow2_floor
from cuda_gym.synth.compose import Candidate
from cuda_gym.tasks.task import task_from_string

WORKER_FILTERS = (
    "eager",
    "deterministic",
    "input_sensitive",
    "not_degenerate",
    "time_window",
    "trivial_answers",
    "compile",
    "cpu_sizes",
)
SEED_A, SEED_B, INIT_SEED = 1234, 98765, 4321
# Least warm-up of each filter timing on CUDA: the workers keep the GPU busy, so its clocks are
# up, and the window is coarse (the judge's own timings warm up longer).
FILTER_WARMUP_MIN_S = 0.05
DEGENERATE_RTOL = 1e-6


@dataclass(frozen=True)
class FilterSettings:
    """What the worker checks and how (a picklable part of SynthConfig)."""

    device: str
    window_ms: tuple[float, float]
    compile_check: bool = True
    calibrate: bool = True
    warmup_runs: int = 2
    timed_runs: int = 7
    exclusive: bool = False


RESOURCE = "resource"


@dataclass
class FilterReport:
    """The worker's answer for one candidate.

    Attributes:
        accepted: Every filter passed.
        failed: Name of the first failing filter, or None.
        filters: Per filter: {"passed": bool, ...details}; filters not reached are absent.
        source: The task source after calibration.
        batch_size: Main-device batch size after calibration.
        eager_ms: Median eager time (None if not measured).
        compile_ms: Median torch.compile time (None if not measured).
        compile_s: First-call time of torch.compile (compilation included).
        worker_s: Seconds the worker spent on the candidate.
    """

    accepted: bool = False
    failed: str | None = None
    filters: dict[str, dict] = field(default_factory=dict)
    source: str = ""
    batch_size: int = 0
    eager_ms: float | None = None
    compile_ms: float | None = None
    compile_s: float | None = None
    worker_s: float = 0.0


class _Rejected(Exception):
    def __init__(self, name: str, details: dict) -> None:
        super().__init__(name)
        self.name = name
        self.details = details


def _module(source: str, name: str = "synth_task") -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)  # our own generated task code
    return module


def _outputs(model, inputs: list) -> list:
    out = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _build(module, device: str):
    torch.manual_seed(INIT_SEED)
    with torch.device(device):
        model = module.Model(*module.get_init_inputs())
    return model.to(device)


def _scale(out: torch.Tensor) -> float:
    return float(out.detach().abs().max()) if out.numel() else 0.0


def _differ(a: list, b: list, rtol: float) -> float:
    """Largest difference between two output lists, relative to the first's magnitude."""
    worst = 0.0
    for x, y in zip(a, b):
        if not x.is_floating_point():
            worst = max(worst, float((x != y).any()))
            continue
        diff = float((x.double() - y.double()).abs().max()) if x.numel() else 0.0
        worst = max(worst, diff / (_scale(x) + 1e-30))
    return worst


def degeneracy(out: torch.Tensor) -> str | None:
    """Why an output is degenerate (constant, near zero, uniform along an axis), or None."""
    if not out.is_floating_point():
        return "constant integer output" if bool((out == out.flatten()[0]).all()) else None
    scale = _scale(out)
    if scale < 1e-6:
        return f"near zero (max |value| {scale:.3g})"
    if float(out.max() - out.min()) <= DEGENERATE_RTOL * scale:
        return "constant"
    for dim, size in enumerate(out.shape):
        if size > 1:
            spread = (out.amax(dim) - out.amin(dim)).max()
            if float(spread) <= DEGENERATE_RTOL * scale:
                return f"uniform along dim {dim}"
    return None


def _check_eager(module, model, device: str) -> tuple[list, list]:
    inputs = make_inputs(module, SEED_A, device)
    try:
        with torch.no_grad():
            out = _outputs(model, inputs)
        _sync(device)
    except Exception as exc:  # the composed task itself is broken: a filter result
        if is_out_of_memory(exc):
            raise
        raise _Rejected("eager", {"error": _error_text(exc)}) from exc
    bad = [type(o).__name__ for o in out if type(o) is not torch.Tensor]
    if bad:
        raise _Rejected("eager", {"error": f"outputs are not tensors: {bad}"})
    finite = all(bool(torch.isfinite(o).all()) for o in out if o.is_floating_point())
    if not finite:
        raise _Rejected("eager", {"error": "non-finite outputs"})
    return inputs, out


def _check_outputs(module, model, device, inputs, out, report: FilterReport) -> None:
    with torch.no_grad():
        torch.manual_seed(1)
        again = _outputs(model, inputs)
        torch.manual_seed(2)
        third = _outputs(model, inputs)
        run_diff = max(_differ(out, again, 0), _differ(out, third, 0))
        report.filters["deterministic"] = {"passed": run_diff <= 1e-4, "max_rel_diff": run_diff}
        if run_diff > 1e-4:
            raise _Rejected("deterministic", report.filters.pop("deterministic"))
        other = _outputs(model, make_inputs(module, SEED_B, device))
    input_diff = _differ(out, other, 0)
    report.filters["input_sensitive"] = {"passed": input_diff > 1e-4, "max_rel_diff": input_diff}
    if input_diff <= 1e-4:
        raise _Rejected("input_sensitive", report.filters.pop("input_sensitive"))
    reasons = [r for r in (degeneracy(o) for o in out) if r]
    report.filters["not_degenerate"] = {"passed": not reasons, "reasons": reasons}
    if reasons:
        raise _Rejected("not_degenerate", report.filters.pop("not_degenerate"))


def _time_eager(model, inputs, settings: FilterSettings, lock) -> float:
    timer = Timer(settings.device, warmup_min_s=FILTER_WARMUP_MIN_S)
    with lock, torch.no_grad():
        stats, _, _ = timer.time_ms(model, [inputs], settings.warmup_runs, settings.timed_runs)
    return float(stats["median_ms"])


def _check_trivial(module, model, device: str) -> dict:
    """The judge's probe: trivial answers against fp32 (and fp64) outputs in every mode."""
    expected, expected64, inputs_per = [], [], []
    try:
        model64 = copy.deepcopy(model).double()
    except Exception as exc:  # a module that cannot run in float64: strict falls back
        if is_out_of_memory(exc):
            raise
        model64 = None
    with torch.no_grad():
        for dist in dict.fromkeys(DISTRIBUTIONS):
            inputs = make_inputs(module, SEED_A, device, dist)
            out = _outputs(model, inputs)
            if dist != "as_is" and not all(
                bool(torch.isfinite(o).all()) for o in out if o.is_floating_point()
            ):
                continue
            expected.append(out)
            inputs_per.append(inputs)
            if model64 is not None:
                try:
                    doubled = [x.double() if x.is_floating_point() else x for x in inputs]
                    expected64.append(_outputs(model64, doubled))
                except Exception as exc:  # fp64 unsupported by an op: strict falls back
                    if is_out_of_memory(exc):
                        raise
                    model64, expected64 = None, []
        answers = trivial_answers(expected, inputs_per)
        passing = {}
        for mode in MODES:
            names = [
                name
                for name, answer in answers.items()
                if _matches(expected, answer, mode, expected64)
            ]
            if names:
                passing[mode] = names
    return {"passed": not passing, "passing_answers": passing, "distributions": len(expected)}


def _matches(expected: list, answer: list, mode: str, expected64: list) -> bool:
    """check_outputs_match over all trials, stopping at the first trial that fails."""
    for k in range(len(expected)):
        e64 = expected64[k : k + 1] if expected64 else None
        if not check_outputs_match(expected[k : k + 1], answer[k : k + 1], mode, e64).correct:
            return False
    return True


def _check_compile(model, inputs, out, settings: FilterSettings, lock) -> dict:
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            start = time.perf_counter()
            got = _outputs(compiled, inputs)
            _sync(settings.device)
            compile_s = time.perf_counter() - start
            timer = Timer(settings.device, warmup_min_s=FILTER_WARMUP_MIN_S)
            with lock:
                stats, _, _ = timer.time_ms(
                    compiled, [inputs], settings.warmup_runs, settings.timed_runs
                )
    except Exception as exc:  # a task torch.compile cannot handle is filtered out
        if is_out_of_memory(exc):
            raise
        return {"passed": False, "error": _error_text(exc)}
    finally:
        torch._dynamo.reset()
    diff = _differ(out, got, 0)
    return {
        "passed": diff <= 1e-2,
        "max_rel_diff_vs_eager": diff,
        "compile_s": compile_s,
        "median_ms": float(stats["median_ms"]),
    }


def _check_cpu_sizes(source: str) -> dict:
    task = task_from_string(source, "synth").for_device("cpu")
    if task.source == source:
        return {"passed": True, "note": "no CPU_SIZES"}
    module = _module(task.source, "synth_task_cpu")
    try:
        model = _build(module, "cpu")
        with torch.no_grad():
            out = _outputs(model, make_inputs(module, SEED_A, "cpu"))
    except Exception as exc:  # the CPU sizes are broken: filter result
        return {"passed": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    reasons = [r for r in (degeneracy(o) for o in out) if r]
    finite = all(bool(torch.isfinite(o).all()) for o in out if o.is_floating_point())
    return {"passed": finite and not reasons, "finite": finite, "reasons": reasons}


def _calibrated_batch(candidate: Candidate, measured_ms: float, window: tuple[float, float]) -> int:
    """The batch size that should bring the eager time near the window's target.

    Never beyond 64x the current one or the profile's memory bound.
    """
    low, high = window
    target = min(math.sqrt(low * high), 4 * low)
    batch = candidate.batch_size
    wanted = batch * target / max(measured_ms, 1e-6)
    builder = candidate.builder
    _, bytes_per_batch = builder.cost_per_batch(MAIN)
    memory_cap = builder.profiles[MAIN].max_bytes / max(bytes_per_batch, 1.0)
    return max(1, min(pow2_floor(wanted), batch * 64, pow2_floor(memory_cap)))


class FixedSource:
    """A hand-written task source in the place of a Candidate (no batch calibration)."""

    def __init__(self, source: str) -> None:
        self._source = source
        self.batch_size = 0

    def source(self) -> str:
        """The task source."""
        return self._source

    def with_batch_size(self, batch: int) -> FixedSource:
        """Sources are not rescaled: the same object."""
        return self


def run_filters(
    candidate: Candidate | FixedSource, settings: FilterSettings, lock=None
) -> FilterReport:
    """Run every worker filter on a candidate (on `settings.device`); never raises for a task.

    Args:
        candidate: The composed task, or a FixedSource (then calibration is skipped).
        settings: Device, window and switches.
        lock: The device lock shared by the workers (see `_run_chain` for what it guards).
    """
    start = time.monotonic()
    lock = lock if lock is not None else _NoLock()
    report = FilterReport()
    for attempt in range(2):
        report.filters = {}
        report.source = candidate.source()
        report.batch_size = candidate.batch_size
        try:
            with _gate(lock, settings.exclusive):
                retry = _run_chain(candidate, settings, lock, report, first=attempt == 0)
        except _Rejected as rej:
            report.failed = rej.name
            report.filters[rej.name] = {"passed": False, **rej.details}
            retry = None
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            # Not a property of the task: other workers held the memory. The pipeline runs it
            # again, alone on the device.
            report.failed = RESOURCE
            report.filters = {RESOURCE: {"passed": False, "error": _error_text(exc)}}
            retry = None
        finally:
            if settings.device == "cuda":
                torch.cuda.empty_cache()
        if retry is None:
            break
        candidate = candidate.with_batch_size(retry)
    report.accepted = report.failed is None
    report.worker_s = time.monotonic() - start
    return report


def _run_chain(candidate, settings, lock, report: FilterReport, first: bool) -> int | None:
    """The filters in order; returns a new batch size when calibration asks for a retry.

    On CUDA the GPU phases run under the device lock, so a timing never overlaps another
    worker's GPU work; torch.compile's compilation (CPU-bound) runs outside it. On the CPU only
    the timings are locked, so workers still filter in parallel.
    """
    device = settings.device
    gpu_phase = lock if device == "cuda" else _NoLock()
    timing_lock = _NoLock() if device == "cuda" else lock
    module = _module(report.source)
    with gpu_phase:
        try:
            model = _build(module, device)
        except Exception as exc:  # a broken constructor is an eager failure
            if is_out_of_memory(exc):
                raise
            raise _Rejected("eager", {"error": _error_text(exc)}) from exc
        inputs, out = _check_eager(module, model, device)
        report.filters["eager"] = {"passed": True}
        _check_outputs(module, model, device, inputs, out, report)
        eager_ms = _time_eager(model, inputs, settings, timing_lock)
        report.eager_ms = eager_ms
        low, high = settings.window_ms
        inside = low <= eager_ms <= high
        if not inside and first and settings.calibrate and candidate.batch_size:
            batch = _calibrated_batch(candidate, eager_ms, settings.window_ms)
            if batch != candidate.batch_size:
                return batch
        report.filters["time_window"] = {
            "passed": inside,
            "eager_ms": eager_ms,
            "window_ms": list(settings.window_ms),
            "calibrated": not first,
        }
        if not inside:
            raise _Rejected("time_window", report.filters.pop("time_window"))
        try:
            report.filters["trivial_answers"] = _check_trivial(module, model, device)
        except Exception as exc:
            if is_out_of_memory(exc):
                raise
            raise _Rejected("trivial_answers", {"error": _error_text(exc)}) from exc
        if not report.filters["trivial_answers"]["passed"]:
            raise _Rejected("trivial_answers", report.filters.pop("trivial_answers"))
    if settings.compile_check:
        result = _check_compile(model, inputs, out, settings, lock)
        report.compile_s = result.get("compile_s")
        report.compile_ms = result.get("median_ms")
        report.filters["compile"] = result
        if not result["passed"]:
            raise _Rejected("compile", report.filters.pop("compile"))
    if device == "cuda":
        report.filters["cpu_sizes"] = _check_cpu_sizes(report.source)
        if not report.filters["cpu_sizes"]["passed"]:
            raise _Rejected("cpu_sizes", report.filters.pop("cpu_sizes"))
    return None


def _gate(lock, exclusive: bool):
    """The whole-job device gate: alone on the device when `exclusive`, else shared.

    Only the pool's DeviceLock has a gate; inline runs (one job at a time) need none.
    """
    if hasattr(lock, "exclusive"):
        return lock.exclusive() if exclusive else lock.shared()
    return contextlib.nullcontext()


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def filter_job(payload: tuple[Candidate, FilterSettings], lock) -> FilterReport:
    """Pool entry point: `run_filters` on (candidate, settings), with the worker's thread count."""
    threads = int(os.environ.get("CUDA_GYM_SYNTH_THREADS", "0"))
    if threads > 0 and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    candidate, settings = payload
    return run_filters(candidate, settings, lock)
