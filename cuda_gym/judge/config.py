"""JudgeConfig: how the judge builds, checks and times a candidate."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cuda_gym.cache_dir import default_cache_dir
from cuda_gym.errors import ConfigError
from cuda_gym.runtime.sandbox import unsandboxed_requested

MODES = ("strict", "kernelbench", "paper")
CODE_RULES = ("env", "external")
REWARDS = ("milestone", "speedup", "log_speedup")
BASELINES = ("eager", "compile")


FAST_WORKER_START_ENV = "CUDA_GYM_FAST_WORKER_START"


def fast_worker_start_default(device: str) -> bool:
    """JudgeConfig.fast_worker_start's default: $CUDA_GYM_FAST_WORKER_START (1/0), else CUDA's.

    Without the variable forked workers are on for "cuda" and off for "cpu". The variable
    decides for everything that does not set the field itself (the CLI, the env, the test
    suites: `CUDA_GYM_FAST_WORKER_START=0 python -m pytest -m gpu` starts every worker afresh).
    """
    value = os.environ.get(FAST_WORKER_START_ENV, "").strip().lower()
    if value == "":
        return device == "cuda"
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"${FAST_WORKER_START_ENV} must be 1 or 0, got {value!r}")


# The candidate's own kernels must account for at least this share of the profiled GPU time
# (the rest may be fills and copies the fallback ban allows).
MIN_OWN_KERNEL_SHARE = 0.5
# On the CPU the driver samples each runner's CPU time every this many ns of a thread's CPU
# time (cuda_gym.judge.cpu_time). Each sample costs the sampled thread time (on a VM, the
# timer's exit: 1.5-5 % at this period on CI's 2-core VM, memory-bound work paying most;
# benchmarks/cpu_sampling_overhead.py), so the baselines' runners are sampled as well: both
# sides of a speedup pay alike, up to the difference in their kind of work. About 2 ms, but no
# simple multiple of a scheduler tick (1, 3.33, 4 or 10 ms), so that a per-CPU timer does not
# run in step with the tick. (One early look, on CI's VM beside two busy processes, saw 0.65-1.40
# of short threads' CPU time sampled at 2.0 ms; the benchmark, short_thread_sampling.json, saw
# 0.84-1.20 at 2.0 ms and 0.82-1.14 at 2.131 ms: no clear difference.)
CPU_SAMPLE_PERIOD_NS = 2_131_000
# On a GPU the runners' host CPU is sampled too (host compute copied to and from the device
# shows there) unless this is "0" (measured on the H200: docs/judge.md, "cpu_time").
SAMPLE_CUDA_HOST_ENV = "CUDA_GYM_SAMPLE_CUDA_HOST"
# A runner's first call (and a profiled call) may take this much longer than later ones: lazy
# loading of its kernels, library handles, the profiler's start (JudgeConfig.first_call_jit_s
# instead for a solution whose kernels compile at their first call).
FIRST_CALL_EXTRA_S = 10.0
# ... but a candidate's first call, where it compiles nothing, this on the CPU (honest corpora:
# 3-110 ms on the 2-core VM, `stage_times_s["candidate.run.first_call"]`) and this on a GPU
# (0.02-0.21 ms on a busy H100, every case of the exploit and false-rejection suites that does
# not compile at its first call): a hang's first call holds the device's shared side for its
# whole limit, and every timer waits that long (rl_load on an H100: 39 % of the time drains).
FIRST_CALL_EXTRA_CPU_S = 3.0
FIRST_CALL_EXTRA_GPU_S = 5.0


def first_call_extra_s(device: str) -> float:
    """What a runner's first call may take on top on `device` (no first-call compiles)."""
    return FIRST_CALL_EXTRA_CPU_S if device == "cpu" else FIRST_CALL_EXTRA_GPU_S


# On the CPU the solution's runner is sampled per CPU where the kernel allows it (root,
# CAP_PERFMON, kernel.perf_event_paranoid <= 0): every CPU's sampler sees whoever runs there,
# and the runner's threads are picked out by the kernel's fork and exit records, so threads
# too short for a per-thread period are sampled too. "per-thread" forces inherited per-thread
# events (each thread's period starts afresh: threads under one period go unseen).
CPU_SAMPLING_ENV = "CUDA_GYM_CPU_SAMPLING"


def samples_per_cpu() -> bool:
    """Whether the CPU watch samples the solution's runner per CPU ($CUDA_GYM_CPU_SAMPLING)."""
    value = os.environ.get(CPU_SAMPLING_ENV, "per-cpu").strip().lower()
    if value not in ("per-cpu", "per-thread"):
        raise ConfigError(f"${CPU_SAMPLING_ENV} must be per-cpu or per-thread, got {value!r}")
    return value == "per-cpu"


def samples_host_cpu(device: str) -> bool:
    """Whether runners on `device` are sampled by the CPU watch (cuda_gym.judge.cpu_time)."""
    return device == "cpu" or os.environ.get(SAMPLE_CUDA_HOST_ENV, "1") != "0"


@dataclass(frozen=True)
class JudgeConfig:
    """How to judge a candidate solution.

    Attributes:
        device: "cuda" or "cpu"; the env resolves "auto" before building this.
        tolerance_mode: Precision mode: "strict" (fp32 judged against fp64 with a derived
            tolerance), "kernelbench" (fp32 1e-4) or "paper" (1e-2); see judge/compare.py.
        reward: "milestone" (-1/1/2/3), "speedup" (compile time / candidate time, -1 if wrong)
            or "log_speedup" (ln of that, clipped to [-1, 3], -1 if wrong).
        allow_vendor_libraries: Let the candidate's extension call cuBLAS GEMMs and cuDNN
            convolutions through ATen (the published rule); off by default.
        correctness_trials: Input sets (fresh random seeds) checked per evaluation.
        warmup_runs: Untimed calls before timing.
        timed_runs: Timed calls; the median is reported.
        baselines: Which baselines to time: "eager" and/or "compile" (torch.compile).
        reward_margin: Relative margin a speedup must exceed to earn a milestone (0.05 = 5 %).
        build_timeout_s: Limit for building the kernels/ extension (or a load_inline solution).
        build_nice: Niceness of the compilers (0-19; 0: the judge's own). Builds take most
            of a busy judge's CPU; at a lower priority they leave it to the runners that time
            calls and serve them, so a neighbour's build disturbs a timing loop less.
        run_timeout_s: Limit for one reference or candidate process, building excluded.
        load_timeout_s: Limit for the candidate's runner to import model_new.py and build
            ModelNew when nothing is left to compile (it holds the device's gate meanwhile).
        call_time_factor: One call of the candidate may take this many times the reference's
            measured time on the same device before it is stopped as hung ...
        call_time_floor_s: ... and at least this many seconds (its first call 10 s more, 3 s
            on the CPU: `first_call_extra_s`). A
            hanging kernel thus costs seconds, not run_timeout_s, to every judgement waiting.
        first_call_jit_s: What the first call may take on top instead when model_new.py
            imports triton: Triton compiles every kernel (and autotune config) at its first
            call and benchmarks the configs then.
        cpu_census_s: On the CPU, how long the driver may make more untimed calls when the
            sampler has seen too little of forward to say where its time went (0: none).
        retime_baselines: Baselines timed again with every candidate, right after it in the
            same hold of the device, whose times then make the speedups (the cached ones came
            from another moment). None: ("eager",) on the CPU, whose load and clocks drift,
            nothing on a GPU.
        compile_baseline_timeout_s: Extra time the reference process gets for torch.compile.
        cache_dir: Where builds and baseline timings are cached; None uses default_cache_dir().
        cuda_flags: Extra nvcc flags for kernels/*.cu.
        cxx_flags: Extra C++ compiler flags for kernels/*.cpp.
        fast_worker_start: Fork candidate and reference workers from a warm process that has
            already imported torch (cuda_gym.runtime.zygote) instead of starting Python afresh;
            each worker is still its own process, session and process group. None (the
            default): $CUDA_GYM_FAST_WORKER_START, else on for "cuda" and off for "cpu"
            (benchmarks/README.md gives the evidence for each).
        device_gate: Workers take their device's gate (cuda_gym.runtime.device_gate): they
            time and profile only while no other judge worker on the machine uses the device,
            so judgements of several processes can share a GPU. Waiting there does not count
            against run_timeout_s (up to gate_wait_max_s).
        gate_wait_max_s: The most a worker's clock stops while it waits for the gate. The
            worker reports the wait itself, so a hostile candidate could claim it: this bounds
            what a hanging candidate can cost beyond run_timeout_s.
        memory_per_step: CUDA: a worker takes its device-memory reservation once it is in the
            gate (waiting for it outside the gate) and keeps only its measured base while it
            steps out between correctness trials (judge/roles.py); False (the default: on the
            H200 it judged 13.0/min against 15.7, docs/service.md): the whole reservation is
            taken before the gate and held for the worker's life.
        memory_share: CUDA: the share of the GPU's memory that the judges' reservations (the
            MemoryLedger of cuda_gym.runtime.device_gate) may add up to. Above 1 the ledger
            overcommits: a reservation is a judgement's peak held for its whole life, while
            the device's memory in use was 0.26 of what the ledger held at the median (at
            most 0.66; benchmarks/results/rl_load_h200.json). A judgement that runs out of
            memory beside others is judged again alone, so overcommitting costs reruns, never
            a wrong verdict. 1.5 (the default): on the H100, rl_load's wait for memory fell
            from p50 11.3 s to 0, with 69 GiB of 80 in use at most and no rerun (0.9 before;
            benchmarks/results/rl_load_h100.json).
        code_rules: The static rule set for model_new.py (judge/static_checks.py): "env" (the
            environment's, which the agent reads in the workspace skill) or "external" (code
            written elsewhere: `cuda-gym judge` and the KernelBench harness use it, so honest
            code is not rejected for importing os, pathlib, logging, ...).
        precompiled_header: Precompile torch/extension.h once per toolchain and flags and use
            it in later cold builds of binding code (judge/pch.py; GCC only; about 0.8 GB in
            the cache; the first such build takes the extra time once). None: on the cuda
            device only.
        sandbox: Run every process that runs candidate code (the candidate's worker, its
            load_inline build) in the OS sandbox (cuda_gym.runtime.sandbox): own namespaces,
            a read-only view of the system, one writable scratch directory, an unprivileged
            uid, rlimits and a seccomp filter. None (the default): on, unless
            $CUDA_GYM_UNSANDBOXED=1. Off is for development only: every verdict then carries
            flags["unsandboxed"], and a candidate can reach the judge's files and processes.
        sandbox_memory_gib: The sandboxed process's data limit (RLIMIT_DATA: private writable
            memory) in GiB; None: the machine's physical memory. Per process: a cgroup, not
            this, would bound several candidates together.
    """

    device: str = "cpu"
    tolerance_mode: str = "strict"
    reward: str = "milestone"
    allow_vendor_libraries: bool = False
    correctness_trials: int = 5
    warmup_runs: int = 3
    timed_runs: int = 20
    baselines: tuple[str, ...] = BASELINES
    reward_margin: float = 0.05
    build_timeout_s: float = 600.0
    build_nice: int = 10
    run_timeout_s: float = 120.0
    load_timeout_s: float = 60.0
    call_time_factor: float = 100.0
    call_time_floor_s: float = 2.0
    first_call_jit_s: float = 60.0
    cpu_census_s: float = 2.0
    retime_baselines: tuple[str, ...] | None = None
    compile_baseline_timeout_s: float = 300.0
    cache_dir: Path | None = None
    cuda_flags: tuple[str, ...] = ("-O3",)
    cxx_flags: tuple[str, ...] = ("-O3",)
    fast_worker_start: bool | None = None
    device_gate: bool = True
    gate_wait_max_s: float = 600.0
    memory_per_step: bool = False
    memory_share: float = 1.5
    precompiled_header: bool | None = None
    sandbox: bool | None = None
    sandbox_memory_gib: float | None = None
    code_rules: str = "env"

    def __post_init__(self) -> None:
        if self.device not in ("cuda", "cpu"):
            raise ConfigError(f"JudgeConfig.device must be 'cuda' or 'cpu', got {self.device!r}")
        fast_worker_start_default(self.device)  # a malformed variable is refused here
        if self.tolerance_mode not in MODES:
            raise ConfigError(f"Unknown tolerance_mode {self.tolerance_mode!r}; use one of {MODES}")
        if self.code_rules not in CODE_RULES:
            raise ConfigError(f"Unknown code_rules {self.code_rules!r}; use one of {CODE_RULES}")
        if self.reward not in REWARDS:
            raise ConfigError(f"Unknown reward {self.reward!r}; use one of {REWARDS}")
        for name in ("correctness_trials", "timed_runs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"JudgeConfig.{name} must be at least 1")
        if self.warmup_runs < 0:
            raise ConfigError("JudgeConfig.warmup_runs must be >= 0")
        unknown = (set(self.baselines) | set(self.retime_baselines or ())) - set(BASELINES)
        if unknown:
            raise ConfigError(f"Unknown baselines {sorted(unknown)}; use a subset of {BASELINES}")
        for name in (
            "build_timeout_s",
            "run_timeout_s",
            "load_timeout_s",
            "call_time_factor",
            "call_time_floor_s",
            "first_call_jit_s",
            "compile_baseline_timeout_s",
            "gate_wait_max_s",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"JudgeConfig.{name} must be positive")
        if self.cpu_census_s < 0:
            raise ConfigError("JudgeConfig.cpu_census_s must be >= 0")
        if not 0 <= self.build_nice <= 19:
            raise ConfigError("JudgeConfig.build_nice must be in [0, 19]")
        if not 0 <= self.reward_margin < 1:
            raise ConfigError("JudgeConfig.reward_margin must be in [0, 1)")
        unsandboxed_requested()  # a malformed $CUDA_GYM_UNSANDBOXED is refused here
        if not 0 < self.memory_share <= 4:
            raise ConfigError("JudgeConfig.memory_share must be in (0, 4]")
        if self.sandbox_memory_gib is not None and self.sandbox_memory_gib <= 0:
            raise ConfigError("JudgeConfig.sandbox_memory_gib must be positive (or None)")

    @property
    def sandboxed(self) -> bool:
        """sandbox, or where it is None: on unless $CUDA_GYM_UNSANDBOXED=1."""
        if self.sandbox is None:
            return not unsandboxed_requested()
        return self.sandbox

    @property
    def forks_workers(self) -> bool:
        """fast_worker_start, or where it is None its default for this device."""
        if self.fast_worker_start is None:
            return fast_worker_start_default(self.device)
        return self.fast_worker_start

    @property
    def resolved_retime_baselines(self) -> tuple[str, ...]:
        """retime_baselines (None resolved by the device), of the baselines timed at all."""
        wanted = self.retime_baselines
        if wanted is None:
            wanted = ("eager",) if self.device == "cpu" else ()
        return tuple(name for name in wanted if name in self.baselines)

    @property
    def resolved_cache_dir(self) -> Path:
        """cache_dir, or the default cache directory."""
        return Path(self.cache_dir) if self.cache_dir else default_cache_dir()

    @property
    def use_precompiled_header(self) -> bool:
        """precompiled_header, with None resolved by the device."""
        if self.precompiled_header is None:
            return self.device == "cuda"
        return self.precompiled_header
