"""Every request and result that crosses a judge process boundary, as dataclasses.

Two boundaries:

- judge <-> trusted worker (probe, candidate driver): a request as JSON on the worker's standard
  input, a result as JSON in `result_path`. Both sides are trusted code.
- candidate driver <-> untrusted runner (`cuda_gym.judge.runner`): JSON messages on a Unix
  socket. The runner imports no module of `cuda_gym.judge`, so it builds these messages from
  its own code with the same field names; the driver reads them through `decode`, which refuses
  a message whose keys or types differ (the runner's process ran candidate code: everything it
  sends is untrusted and may only ever make a verdict worse).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field


class ProtocolError(ValueError):
    """A message that does not have the fields and types its dataclass declares."""


def encode(message) -> str:
    """A dataclass message as JSON text."""
    return json.dumps(dataclasses.asdict(message))


def decode(cls: type, data):
    """`data` (a dict, or JSON text) as a `cls`, every field checked against its annotation.

    Raises:
        ProtocolError: A missing or unknown key, or a value of the wrong type.
    """
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise ProtocolError(f"{cls.__name__}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ProtocolError(f"{cls.__name__}: unknown fields {sorted(unknown)}")
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ProtocolError(f"{cls.__name__}: missing field {f.name!r}")
            continue
        values[f.name] = _check(hints[f.name], data[f.name], f"{cls.__name__}.{f.name}")
    return cls(**values)


def _check(hint, value, where: str):
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return _check(option, value, where)
            except ProtocolError:
                continue
        raise ProtocolError(f"{where}: {value!r:.80} is none of {hint}")
    if hint is type(None):
        if value is not None:
            raise ProtocolError(f"{where}: expected null")
        return None
    if hint is typing.Any:
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: expected a list")
        (item,) = typing.get_args(hint) or (typing.Any,)
        return [_check(item, v, f"{where}[]") for v in value]
    if origin is dict:
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: expected an object")
        _, item = typing.get_args(hint) or (str, typing.Any)
        return {str(k): _check(item, v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return decode(hint, value)
    if hint is float:
        if type(value) in (int, float):
            return float(value)
        raise ProtocolError(f"{where}: expected a number")
    if hint in (int, str, bool):
        if type(value) is not hint:
            raise ProtocolError(f"{where}: expected {hint.__name__}, got {type(value).__name__}")
        return value
    raise ProtocolError(f"{where}: unsupported annotation {hint}")


# -- judge <-> trusted workers -----------------------------------------------------------------


@dataclass(frozen=True)
class WorkerHeader:
    """What every trusted device role gets from the judge besides its own request.

    Attributes:
        result_path: Where the worker writes its result (JSON); `<result_path>.stage` holds the
            stage it is in ("gate" while it waits for the device gate: the judge's clock stops).
        task_path: The worker's own copy of the task file.
        device: "cuda" or "cpu".
        device_gate: Take the device's gate (shared; alone while timing).
        gate_alone: Hold the gate alone throughout (a rerun after running out of memory); on
            CUDA, with the device's whole memory reserved.
        device_bytes: On CUDA, the device memory to reserve before starting (the judges'
            MemoryLedger of cuda_gym.runtime.device_gate); None: no reservation.
        fork_server: The address of the judge's fork server of runners
            (cuda_gym.runtime.fork_server), or None: runners start afresh.
        memory_per_step: Take the reservation once in the gate and keep only the base between
            trials (JudgeConfig.memory_per_step).
        memory_share: The share of the GPU's memory that reservations may add up to
            (JudgeConfig.memory_share).
    """

    result_path: str
    task_path: str
    device: str
    device_gate: bool = False
    gate_alone: bool = False
    device_bytes: int | None = None
    fork_server: str | None = None
    memory_per_step: bool = False
    memory_share: float = 1.5


@dataclass(frozen=True)
class ProbeRequest:
    """Probe a task once: input distributions, float64 support, trivial answers, roofline."""

    header: WorkerHeader
    seed: int
    init_seed: int


@dataclass(frozen=True)
class CandidateRequest:
    """Judge one solution: the trusted driver's whole job (see cuda_gym.judge.driver).

    Attributes:
        solution_dir: The snapshot holding model_new.py (and kernels/).
        module_dir: Directory of the built `kernels_ext`, or None.
        seeds: Correctness trial seeds (secret: they never reach the runner).
        init_seed: Seed of both models' construction (KernelBench's way).
        distributions: Input distribution of each trial.
        tolerance_mode: "strict", "kernelbench" or "paper".
        fp64_ok: The task runs in float64 (strict mode's reference).
        strict_units: The probe's count of fp32 rounding units per output (the strict bound's
            factor, cuda_gym.judge.contract); None: strict keeps its measured bound only.
        allow_vendor_libraries: GEMM/convolution ops allowed inside forward.
        data_movement: The task's reference only moves data (the probe's finding): PyTorch's
            copies are refused inside forward too (`fallback.COPY_OPS`).
        timing: Time the candidate (and the baselines below).
        profile: Return the candidate's profile table.
        reference_as_candidate: The solution is the task's own Model (ban lifted).
        warmup_runs: Least number of warm-up calls (a random number more are made).
        timed_runs: Least number of timed calls (a random number more are made).
        baselines: Baselines to time ("eager", "compile"); the cached ones are left out.
        runner_timeout_s: Time the candidate's runner may use in all (load and calls).
        baseline_timeout_s: Time a baseline's runner may use in all.
        sandbox: Start every runner in the OS sandbox (cuda_gym.runtime.sandbox).
        sandbox_data_bytes: A sandboxed runner's RLIMIT_DATA (None: no limit).
        extensions_dir: The torch extensions model_new.py builds, built by the judge's build
            stage (cuda_gym.judge.inline_build); the runner imports them from a copy.
        compile_extensions: The runner may compile an extension that is not there (the build
            stage could not import model_new.py); its load then runs off the device's gate.
        load_timeout_s: Time the candidate's runner may take to load when it compiles nothing
            (None: runner_timeout_s).
        call_time_factor: One call of the candidate may take this many times the reference's
            time on the same device (the fastest the driver measured) ...
        call_time_floor_s: ... but never less than this many seconds.
        first_call_extra_s: What the candidate's first call may take on top (lazy loading;
            a solution that JIT-compiles at its first call, Triton's, gets more).
        census_s: On the CPU, how long more untimed calls may be made for a forward the
            sampler has seen too little of (JudgeConfig.cpu_census_s).
        baselines_only: Time `baselines` only (no candidate: the solution fields are unused).
        retime_baselines: Baselines timed again right after the candidate, in the same hold of
            the device, so that both see the same machine (the CPU's load and clocks drift
            between a cached baseline and a later candidate).
        library_index: The judge's index of the machine's libraries (a sealed file of
            cuda_gym.judge.library_copies): a library the runner builds or writes is the
            solution's own code only when it is not a copy of one of them. None: not needed.
        thread_ban: The judge's library that extends the fallback ban to every thread of the
            candidate's runner (cuda_gym.judge.thread_ban). None: not needed (the solution has
            no native code of its own) or not available here.
    """

    header: WorkerHeader
    solution_dir: str
    module_dir: str | None
    seeds: list[int]
    init_seed: int
    distributions: list[str]
    tolerance_mode: str
    fp64_ok: bool
    strict_units: float | None
    allow_vendor_libraries: bool
    timing: bool
    profile: bool
    reference_as_candidate: bool
    warmup_runs: int
    timed_runs: int
    baselines: list[str]
    runner_timeout_s: float
    baseline_timeout_s: float
    sandbox: bool = True
    sandbox_data_bytes: int | None = None
    extensions_dir: str | None = None
    compile_extensions: bool = True
    load_timeout_s: float | None = None
    call_time_factor: float = 100.0
    call_time_floor_s: float = 2.0
    first_call_extra_s: float = 10.0
    census_s: float = 2.0
    data_movement: bool = False
    baselines_only: bool = False
    retime_baselines: list[str] = field(default_factory=list)
    library_index: str | None = None
    thread_ban: str | None = None


@dataclass
class ComparisonResult:
    """Outputs against the reference (mirrors cuda_gym.judge.compare.Comparison)."""

    correct: bool
    max_abs_error: float
    max_rel_error: float
    details: list[str]


@dataclass
class TimingStats:
    """One timed function, measured by the trusted driver around each synchronised call.

    Attributes:
        median_ms: The reported time: median host time of a call (go -> "done") minus the
            round trip.
        mean_ms: Mean, same correction.
        min_ms: Fastest call, same correction.
        max_ms: Slowest call, same correction.
        spread: (p90 - p10) / median of the corrected times.
        host_median_ms: Median of go -> "done", uncorrected.
        round_trip_ms: The fastest of the empty calls measured the same way (subtracted).
        flush_ms: On CUDA, the driver's L2 flush alone (median); 0 on the CPU.
        flush_excess_ms: Median flush time during the timed calls minus `flush_ms`.
        side_work: The flush before calls ran slower than alone: other work was on the GPU.
        runs: Timed calls.
        warmup_calls: Warm-up calls made before them.
        rechecked_calls: Timed calls whose outputs were compared with the reference.
        rechecked_by_seed: Their inputs were drawn again from their seeds for the check (the
            task's get_inputs draws the same inputs twice from one seed), not kept.
        finish_ms: Median time from the runner's "done" to its reply (output checks, the
            outputs handed over): not in the time; a candidate's beyond its baselines' is.
        finish_min_ms: The fastest call's finish: a busy host only slows a finish, so the
            fastest ones of two runs compare even when one ran under load.
        runner_event_ms: Diagnostics only (CUDA_GYM_TRACE_EVENTS=1): the median of the
            runner's own CUDA-event times of forward in the timed calls. Reported by the
            process that ran the code, so never scored; None when not traced.
        runner_trace_ms: Diagnostics only, with `runner_event_ms`: medians of where a timed
            call's host time went, from the runner's host clock (CallReply.marks) and the
            driver's: "to_runner" (sending until the runner's call starts), "before_forward"
            (placing inputs, census, seeding), "forward_host" (forward's launches, until it
            returned), "synchronise" (waiting for the GPU), "to_done" (until the driver read
            "done"). Never scored; None when not traced.
    """

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    spread: float
    host_median_ms: float
    round_trip_ms: float
    flush_ms: float
    flush_excess_ms: float
    side_work: bool
    runs: int
    warmup_calls: int
    rechecked_calls: int
    rechecked_by_seed: bool = False
    finish_ms: float = 0.0
    finish_min_ms: float = 0.0
    runner_event_ms: float | None = None
    runner_trace_ms: dict[str, float] | None = None


@dataclass
class BaselineResult:
    """A baseline's timing, or why it could not be timed."""

    timing: TimingStats | None = None
    error: str | None = None


@dataclass
class KernelSummary:
    """The candidate's profiled GPU kernels by origin (the runner's profiler: untrusted)."""

    kernel_ms_per_call: float
    own_ms: float
    torch_ms: float
    vendor_ms: float
    own_share: float | None
    foreign: list[str]


@dataclass
class CandidateResult:
    """What the trusted driver decided about one solution.

    Attributes:
        ok: The driver itself worked (False: an infrastructure failure, in `error`).
        error: The driver's own failure, if not ok.
        candidate_error: Why the candidate failed to load or run (a crash, a time-out, an
            exception): the verdict's error; None when it ran.
        build_failed: The candidate failed while building its extension at import.
        stage: The stage the candidate failed in, or where the driver ended.
        violations: Rule violations ("code: text").
        comparison: The correctness trials against the reference.
        deterministic: Trial 0 run twice agreed within the tolerance.
        bitwise_deterministic: ... and bit for bit.
        timing_recheck: The re-checked timed calls against the reference.
        timing: The candidate's timing.
        baselines: Baselines timed by this run, by name.
        profile_table: The candidate's top kernels/operators (text, untrusted).
        kernels: The candidate's kernels by origin (CUDA; untrusted).
        weights_not_copied: Reference weights with no same-named, same-shaped parameter.
        numerics: The TF32 settings the driver pinned.
        device_name: The device.
        gpu_state: Clocks, temperature and power after timing (CUDA).
        stage_s: Seconds per stage.
        device_peak: The driver's peak GPU memory (allocated, reserved bytes).
        device_use: The peak GPU memory of the driver and its runners together, bytes, as
            NVML counts it (cuda_gym.judge.device_use); None where not measured.
        device_memory: The driver's PyTorch memory at the end of each phase reached ("setup",
            "trials", "repeat", "timing", "recheck"): {"peak", "reserved", "allocated"} bytes.
        cpu_s: Host CPU seconds of the driver and the runners it waited for.
        stage_cpu_s: Host CPU seconds per stage of the driver and its runners, live or reaped.
        cpu_time: On the CPU, where forward's sampled CPU time went
            (`cuda_gym.judge.cpu_time.Attribution.summary`), or {"error": why not sampled}.
        memory_short: The candidate failed with an out-of-memory error and, with its runner
            gone, the driver found too little free memory for the judgement (`roles.
            memory_short`): others held it, so a rerun alone is worth it. Measured by the
            driver, never taken from the candidate's error text.
        runners_forked: Runners the fork server started (cuda_gym.runtime.fork_server); the
            others started afresh.
    """

    ok: bool = True
    error: str | None = None
    candidate_error: str | None = None
    build_failed: bool = False
    stage: str = "start"
    violations: list[str] = field(default_factory=list)
    comparison: ComparisonResult | None = None
    deterministic: bool = True
    bitwise_deterministic: bool = True
    timing_recheck: ComparisonResult | None = None
    timing: TimingStats | None = None
    baselines: dict[str, BaselineResult] = field(default_factory=dict)
    profile_table: str | None = None
    kernels: KernelSummary | None = None
    weights_not_copied: list[str] = field(default_factory=list)
    numerics: dict[str, bool] = field(default_factory=dict)
    device_name: str = ""
    gpu_state: dict[str, int | float | None] | None = None
    stage_s: dict[str, float] = field(default_factory=dict)
    device_peak: dict[str, int] | None = None
    device_use: int | None = None
    device_memory: dict[str, dict[str, int]] = field(default_factory=dict)
    cpu_s: float | None = None
    stage_cpu_s: dict[str, float] = field(default_factory=dict)
    cpu_time: dict[str, typing.Any] | None = None
    memory_short: bool = False
    runners_forked: int = 0


# -- driver <-> untrusted runner ---------------------------------------------------------------


@dataclass(frozen=True)
class RunnerInit:
    """The runner's one set-up message (driver -> runner).

    Attributes:
        solution_dir: Directory holding model_new.py (the runner imports it).
        module_dir: Directory of the built `kernels_ext`, put first on sys.path; or None.
        device: "cuda" or "cpu".
        init_seed: `torch.manual_seed(init_seed)` right before `ModelNew(*init_args)`.
        init_path: torch.save'd {"init_args": [...], "weights": {name: tensor}} (the
            reference's constructor arguments and weights, read with weights_only=True).
        banned: Refuse PyTorch compute inside forward (False only for the task's own Model).
        allowed_ops: aten ops allowed inside forward ("aten::empty", ...).
        compile_model: Serve `torch.compile(model)` (the compile baseline).
        compile_extensions: Compile a torch extension that TORCH_EXTENSIONS_DIR lacks (False:
            refuse, it should have been built by the judge's build stage).
    """

    solution_dir: str
    module_dir: str | None
    device: str
    init_seed: int
    init_path: str
    banned: bool
    allowed_ops: list[str]
    compile_model: bool
    compile_extensions: bool = True


@dataclass
class RunnerReady:
    """The runner's answer to RunnerInit (runner -> driver; untrusted).

    Attributes:
        error: Why the solution could not be loaded (None: loaded).
        build_failed: The load failed while building an extension.
        weights_not_copied: Reference weights with no same-named, same-shaped parameter.
        violations: Rule violations the runner saw while the solution loaded, when the load
            failed (a refused `exec` at import, say: a report of one rejects, its absence
            proves nothing).
    """

    error: str | None
    build_failed: bool
    weights_not_copied: list[str]
    violations: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TensorSpec:
    """Where one tensor lies in a call's buffer: byte offset, shape, dtype ("float32").

    A non-tensor argument or output has `dtype` "" and its JSON value in `value`.
    """

    offset: int
    shape: list[int]
    dtype: str
    value: bool | int | float | str | None = None


@dataclass(frozen=True)
class CallRequest:
    """One call of the served model (driver -> runner).

    On the CPU the message carries two file descriptors: the inputs' buffer (written by the
    driver just before) and the outputs' buffer (poisoned). On CUDA the buffers were shared once
    (`ShareBuffers`) and rewritten by the driver before this message.

    Attributes:
        call_id: Increasing number (the empty calls before the RunnerInit: -1, -2, ...); the
            reply repeats it.
        kind: "call" (run forward), "null" (reply at once: the round trip's cost; only
            before the RunnerInit, while no candidate code is loaded) or "profile" (run
            forward `profile_runs` times under the profiler, outputs discarded).
        forward_seed: `torch.manual_seed` right before forward (stochastic tasks).
        inputs: The arguments, in order.
        outputs: Where each output goes (the reference's outputs' layout).
        input_bytes: Size of the CPU inputs' buffer.
        output_bytes: Size of the CPU outputs' buffer.
        profile_runs: Calls under the profiler (kind "profile").
        count_own_calls: Count calls into the solution's own extensions (the correctness
            calls; left off in timing, where the hook would cost time the baselines do not pay).
    """

    call_id: int
    kind: str
    forward_seed: int = 0
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    input_bytes: int = 0
    output_bytes: int = 0
    profile_runs: int = 0
    count_own_calls: bool = False


@dataclass
class CallReply:
    """A call's answer (runner -> driver; untrusted).

    A "call" whose forward returned is first answered {"call_id": ..., "done": true, "nonce":
    ...}, right after forward and the runner's synchronisation (where the driver stops a timed
    call's clock), then with this reply once the outputs are in the driver's slots. The nonce
    is the request's: a random number RunnerLink adds to every request, so no "done" can be
    sent before its call arrives; nor may anything wait on the socket when a call is sent.

    Attributes:
        call_id: The request's.
        error: Forward raised (its message), or an output did not fit its slot.
        violations: Rule violations the runner saw (an in-process ban: a report of one rejects,
            but a candidate could suppress it; see the driver's docstring).
        values: The non-tensor outputs (None at tensor positions).
        own_calls: Calls into the candidate's own compiled extensions during forward.
        profile_rows: For kind "profile": [name, calls, total device ms] per kernel/operator.
        event_ms: Diagnostics only, for a call that asked for it (CUDA_GYM_TRACE_EVENTS=1):
            forward's time between the runner's own CUDA events. The candidate's own figure:
            never scored.
        marks: Diagnostics only, with `event_ms`: the runner's host clock (CLOCK_MONOTONIC,
            seconds) at the call's start, before forward, after forward returned, and after
            its synchronisation. Never scored.
    """

    call_id: int
    error: str | None
    violations: list[str]
    values: list[bool | int | float | None]
    own_calls: int
    profile_rows: list[list[str | int | float]] = field(default_factory=list)
    event_ms: float | None = None
    marks: list[float] | None = None
