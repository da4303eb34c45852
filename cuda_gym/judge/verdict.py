"""The judge's result types and the milestone reward."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import Enum


class _NamedEnum(str, Enum):
    """A str enum whose members print as their values (as in f-strings and JSON)."""

    def __str__(self) -> str:
        return self.value


class ViolationKind(_NamedEnum):
    """The rule a `Verdict.violations` entry breaks: the text before the entry's first ":".

    An entry reads "<kind>: <message>"; a static finding reads "static:<rule>: line N: ...",
    its rule one of `static_checks.RULES`. The candidate's runner (judge/runner.py) imports
    nothing of cuda_gym and writes its kinds (torch_fallback, output_type, output_alias,
    async_work) as literal text; tests/judge/test_verdict.py pins them to this list.

    Members:
        STATIC: model_new.py or a kernels/ source breaks a source rule.
        TORCH_FALLBACK: ModelNew.forward ran a PyTorch compute op or took tensor data to the host.
        INPUT_MUTATED: ModelNew.forward modified one of its inputs.
        OUTPUT_ALIAS: An output shares memory with an input.
        OUTPUT_TYPE: An output is not a plain Tensor (or a plain scalar).
        ASYNC_WORK: ModelNew.forward started a host thread that outlived the call.
        NATIVE_SYMBOLS: The compiled extension calls PyTorch or BLAS compute below the dispatcher.
        NO_OWN_KERNEL: ModelNew.forward called none of the solution's own compiled functions.
        NONDETERMINISTIC: Two runs on one input differ beyond the tolerance.
        TIMING_RECHECK: Outputs produced inside the timing loop are wrong.
        FOREIGN_KERNELS: PyTorch's (or a disallowed vendor library's) kernels took most of the
            profiled GPU time; on the CPU, compute that is not the solution's (PyTorch's
            kernels, another library's, code in no file) took a share of forward's sampled CPU
            time (cuda_gym.judge.cpu_time).
    """

    STATIC = "static"
    TORCH_FALLBACK = "torch_fallback"
    INPUT_MUTATED = "input_mutated"
    OUTPUT_ALIAS = "output_alias"
    OUTPUT_TYPE = "output_type"
    ASYNC_WORK = "async_work"
    NATIVE_SYMBOLS = "native_symbols"
    NO_OWN_KERNEL = "no_own_kernel"
    NONDETERMINISTIC = "nondeterministic"
    TIMING_RECHECK = "timing_recheck"
    FOREIGN_KERNELS = "foreign_kernels"


def format_violation(kind: ViolationKind, message: str, rule: str | None = None) -> str:
    """A violation as `Verdict.violations` holds it: "<kind>: <message>".

    With `rule` (static findings): "static:<rule>: <message>".
    """
    head = kind.value if rule is None else f"{kind.value}:{rule}"
    return f"{head}: {message}"


def violation_kind(text: str) -> ViolationKind | None:
    """The kind of a `Verdict.violations` entry; None for text of no known kind."""
    head = text.split(":", 1)[0].strip()
    try:
        return ViolationKind(head)
    except ValueError:
        return None


def violation_code(text: str) -> str | None:
    """What names a violation in reports: its kind, or "static:<rule>" for a static finding."""
    kind = violation_kind(text)
    if kind is ViolationKind.STATIC:
        parts = text.split(":", 2)
        return f"static:{parts[1].strip()}" if len(parts) > 1 else kind.value
    return None if kind is None else kind.value


class Flag(_NamedEnum):
    """The keys of `Verdict.flags`: facts worth auditing that do not change the verdict.

    Members:
        REFERENCE_AS_CANDIDATE: True: the task's own Model was judged as the candidate
            (`Judge.evaluate_reference_as_candidate`).
        UNSANDBOXED: True: judged without the OS sandbox (`JudgeConfig.sandboxed` off).
        DRIVER_RETRIED: The error of the driver's first run, which timed out; it ran once more
            with twice the time.
        RETRIED_ALONE_AFTER_OOM: The roles that ran out of memory and ran once more alone on
            the device.
        BASELINE_ERRORS: Why a baseline could not be timed, by baseline name.
        DEGENERATE_TASK: The trivial answers (judge/trivial.py) that pass this task in this
            tolerance mode.
        FP64_DISAGREES: True: strict mode's float64 reference computes something else for this
            task; float32 outputs are held to kernelbench's 1e-4.
        NUMERICS: The TF32 settings the driver pinned.
        NONDETERMINISTIC: True: an incorrect candidate whose two runs on one input also differ.
        BITWISE_NONDETERMINISTIC: True: two runs on one input agreed within the tolerance, but
            not bit for bit.
        KERNELS: The candidate's profiled GPU time by kernel origin (a KernelSummary as a dict;
            untrusted).
        PROFILE_KERNEL_MS_PER_CALL: The profiled kernel milliseconds per call (untrusted).
        GPU_STATE: Clocks, temperature and power after timing (CUDA).
        CPU_TIME: On the CPU, forward's CPU time sampled from outside its process, by place
            (own, runtime, torch_compute, foreign; samples) with the top places outside the
            solution's code; or {"error": why it could not be sampled} (cuda_gym.judge.cpu_time).
        CANDIDATE_HOST_MEDIAN_MS: The candidate's median host wall-clock milliseconds per call.
        CANDIDATE_TIMING: The driver's full timing statistics of the candidate (a TimingStats
            as a dict).
        FINISH_EXCESS_MS: How much longer the candidate's calls took from "done" to their reply
            than its baselines', median to median or fastest to fastest, whichever is more
            (added to its time; see TimingStats.finish_ms).
        DEVICE_PEAK_BYTES: Peak GPU memory ("allocated", "reserved" bytes) by worker role.
        DEVICE_BYTES_RESERVED: The GPU memory the candidate's worker reserved in the machine's
            memory ledger before it started (from the task's probe, or from what earlier
            judgements of the task used: cuda_gym.judge.judge.device_bytes_for).
        DEVICE_BYTES_USED: The peak GPU memory of the candidate's driver and runners together
            (NVML's per-process count after the timed calls: cuda_gym.judge.device_use).
        DEVICE_MEMORY_BY_PHASE: The candidate's driver's PyTorch memory at the end of each
            phase ({phase: {"peak", "reserved", "allocated"}} bytes; CandidateResult).
        WORKER_CPU_S: Host CPU seconds by worker role, its runners and compilers included (for
            a zygote's child, from its fork; what the machine's cores spent on this judgement),
            and by "role.stage".
        RUNNERS_FORKED: Runners started by the fork server, by worker role (the rest started
            afresh; cuda_gym.runtime.fork_server).
        SIDE_WORK: The L2 flush before the timed calls ran slower than alone: other work was on
            the GPU ({"flush_ms", "flush_excess_ms"}).
        PROFILE_MISMATCH: The profiled kernel time is far from the measured time
            ({"profile_kernel_ms", "measured_ms"}).
        SPEED_OF_LIGHT: Timed below the task's speed-of-light bound, so no speedup is credited
            ({"candidate_ms", "bound_ms"}).
        BASELINES_RETIMED: Baselines timed again right after the candidate, whose times the
            speedups use ({name: {"cached_ms", "now_ms"}}).
        NOT_COPIED: Files of the solution the judge's snapshot left out, as "path: why" (a
            symbolic link, not a regular file, too large): the judge reads regular files only.
        TIMING_NOISE: By baseline, about two standard errors of the speedup, relative (from
            the p10-p90 spread and the number of timed calls of the candidate and of the
            baseline): a milestone needs a speedup beyond it as well as beyond the margin.
        THREAD_BAN_UNAVAILABLE: Why the fallback ban could not be extended to the threads the
            solution's native code starts (cuda_gym.judge.thread_ban): the library could not
            be built here. The ban on forward's own thread and the CPU sampler still hold.
    """

    REFERENCE_AS_CANDIDATE = "reference_as_candidate"
    UNSANDBOXED = "unsandboxed"
    DRIVER_RETRIED = "driver_retried"
    RETRIED_ALONE_AFTER_OOM = "retried_alone_after_oom"
    BASELINE_ERRORS = "baseline_errors"
    DEGENERATE_TASK = "degenerate_task"
    FP64_DISAGREES = "fp64_disagrees"
    NUMERICS = "numerics"
    NONDETERMINISTIC = "nondeterministic"
    BITWISE_NONDETERMINISTIC = "bitwise_nondeterministic"
    KERNELS = "kernels"
    PROFILE_KERNEL_MS_PER_CALL = "profile_kernel_ms_per_call"
    GPU_STATE = "gpu_state"
    CPU_TIME = "cpu_time"
    CANDIDATE_HOST_MEDIAN_MS = "candidate_host_median_ms"
    CANDIDATE_TIMING = "candidate_timing"
    FINISH_EXCESS_MS = "finish_excess_ms"
    DEVICE_PEAK_BYTES = "device_peak_bytes"
    DEVICE_BYTES_RESERVED = "device_bytes_reserved"
    DEVICE_BYTES_USED = "device_bytes_used"
    DEVICE_MEMORY_BY_PHASE = "device_memory_by_phase"
    WORKER_CPU_S = "worker_cpu_s"
    RUNNERS_FORKED = "runners_forked"
    SIDE_WORK = "side_work"
    PROFILE_MISMATCH = "profile_mismatch"
    SPEED_OF_LIGHT = "speed_of_light"
    BASELINES_RETIMED = "baselines_retimed"
    TIMING_NOISE = "timing_noise"
    THREAD_BAN_UNAVAILABLE = "thread_ban_unavailable"
    NOT_COPIED = "not_copied"


def milestone_reward(
    correct: bool,
    speedup_vs_eager: float | None,
    speedup_vs_compile: float | None,
    margin: float = 0.05,
    noise: dict | None = None,
) -> float:
    """The CUDA-Agent milestone reward.

    Args:
        correct: The candidate passed every check.
        speedup_vs_eager: Eager time / candidate time.
        speedup_vs_compile: torch.compile time / candidate time.
        margin: A speedup must exceed 1 + margin ...
        noise: ... and 1 + the relative noise of the two timings, by baseline name ("eager",
            "compile"; Flag.TIMING_NOISE): a speedup inside the noise is no speedup.

    Returns:
        -1 when incorrect (or not built); 1 when correct; 2 when correct and more than `margin`
        (and the noise) faster than eager; 3 when correct and more than that faster than both
        eager and torch.compile. A baseline that was not measured cannot be beaten.
    """
    if not correct:
        return -1.0
    noise = noise or {}

    def beats(speedup: float | None, name: str) -> bool:
        return speedup is not None and speedup > 1.0 + max(margin, noise.get(name) or 0.0)

    beats_eager = beats(speedup_vs_eager, "eager")
    beats_compile = beats(speedup_vs_compile, "compile")
    if beats_eager and beats_compile:
        return 3.0
    if beats_eager:
        return 2.0
    return 1.0


def compute_reward(
    kind: str,
    correct: bool,
    speedup_vs_eager: float | None,
    speedup_vs_compile: float | None,
    margin: float = 0.05,
    noise: dict | None = None,
) -> float:
    """The reward of a judged candidate.

    Args:
        kind: "milestone" (see `milestone_reward`); "speedup": compile time / candidate time
            (eager when compile was not measured), -1 when incorrect; "log_speedup": the natural
            log of that speedup clipped to [-1, 3], -1 when incorrect.
        correct: The candidate passed every check.
        speedup_vs_eager: Eager time / candidate time.
        speedup_vs_compile: torch.compile time / candidate time.
        margin: Milestone margin.
        noise: Timing noise by baseline (milestones only; see `milestone_reward`).
    """
    if kind == "milestone":
        return milestone_reward(correct, speedup_vs_eager, speedup_vs_compile, margin, noise)
    if not correct:
        return -1.0
    speedup = speedup_vs_compile if speedup_vs_compile is not None else speedup_vs_eager
    if speedup is None or speedup <= 0:
        return 0.0 if kind == "log_speedup" else 1.0
    if kind == "speedup":
        return float(speedup)
    if kind == "log_speedup":
        return float(min(3.0, max(-1.0, math.log(speedup))))
    raise ValueError(f"unknown reward kind {kind!r}")


@dataclass(frozen=True)
class BuildResult:
    """Outcome of building a workspace's kernels/ into the `kernels_ext` extension.

    Attributes:
        ok: True when the extension built and imported (or there was nothing to build).
        module_dir: Directory holding `kernels_ext.so`, or None when nothing was built.
        log: Compiler output, bounded.
        errors: The compiler's first errors, for the agent; empty on success.
        duration_s: Wall-clock seconds spent, near zero for a cache hit.
        cached: True when an identical build was reused.
        sources: Relative paths of the compiled sources.
        wait_s: Seconds spent waiting for a build slot before building.
    """

    ok: bool
    module_dir: str | None
    log: str = ""
    errors: str = ""
    duration_s: float = 0.0
    cached: bool = False
    sources: tuple[str, ...] = ()
    wait_s: float = 0.0


@dataclass
class Verdict:
    """Everything the judge concluded about one candidate.

    Attributes:
        compiled: The sources built and `model_new.py` imported.
        correct: Every output of every trial matched the reference within tolerance.
        verdict: "accept" when correct, else "reject".
        reward: The milestone reward (see `milestone_reward`).
        stage: Where it stopped: "static", "build", "load", "run", "compare", or "done".
        error: A short message for the agent when something failed.
        speedup_vs_eager: Eager median time / candidate median time, when timed.
        speedup_vs_compile: torch.compile median time / candidate median time, when timed.
        time_ms: Median milliseconds: "candidate", "eager", "compile" (None if not measured).
        violations: Rule violations found (empty in a clean run), each "<kind>: <message>"
            (see `ViolationKind`).
        max_abs_error: Largest |candidate - reference| over all outputs and trials.
        max_rel_error: Largest |candidate - reference| / (|reference| + atol).
        checks: Which checks ran and whether each passed (None: not run).
        flags: Facts worth auditing that do not change the verdict, keyed by `Flag`.
        trials: Number of input sets checked.
        tolerance_mode: Precision mode ("strict", "kernelbench" or "paper").
        reward_kind: Which reward function produced `reward`.
        device: "cuda" or "cpu"; `device_name` the GPU or CPU model.
        build: The BuildResult, when a build ran.
        profile_table: Top kernels/operators by device time, when profiled.
        details: Per-trial mismatch notes and other diagnostics.
        duration_s: Wall-clock seconds of the whole evaluation.
        stage_times_s: Wall-clock seconds per step: "build", "candidate", "reference"; the
            waits for a build slot and a device slot are "wait.build" and "wait.slot". A
            worker's stages are "<role>.<stage>"; its waits for the device gate
            ("<role>.gate") are also split by reason: ".entry", ".step" (timers between
            correctness steps), ".alone" (to time), ".back" (a shared hold taken back).
    """

    compiled: bool = False
    correct: bool = False
    verdict: str = "reject"
    reward: float = -1.0
    stage: str = "static"
    error: str | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    time_ms: dict[str, float | None] = field(
        default_factory=lambda: {"candidate": None, "eager": None, "compile": None}
    )
    violations: list[str] = field(default_factory=list)
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    trials: int = 0
    tolerance_mode: str = ""
    reward_kind: str = "milestone"
    checks: dict[str, bool | None] = field(default_factory=dict)
    flags: dict[str, object] = field(default_factory=dict)
    device: str = ""
    device_name: str = ""
    build: BuildResult | None = None
    profile_table: str | None = None
    details: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    stage_times_s: dict[str, float] = field(default_factory=dict)

    def waited_s(self) -> float:
        """Seconds this judgement waited for build and device slots in this process."""
        return sum(s for k, s in self.stage_times_s.items() if k.startswith("wait."))

    def has_violation(self, *kinds: ViolationKind) -> bool:
        """Whether an entry of `violations` is of one of `kinds`."""
        return any(violation_kind(v) in kinds for v in self.violations)

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field (flag keys as plain strings)."""
        data = asdict(self)
        data["flags"] = {str(k): v for k, v in data["flags"].items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Verdict:
        """The Verdict that `to_dict` produced (e.g. after crossing a process boundary).

        Records written before the field was named `tolerance_mode` hold it as "mode".
        """
        fields = dict(data)
        if "mode" in fields:
            fields.setdefault("tolerance_mode", fields.pop("mode"))
        if isinstance(fields.get("build"), dict):
            build = dict(fields["build"])
            build["sources"] = tuple(build.get("sources", ()))
            fields["build"] = BuildResult(**build)
        return cls(**fields)
