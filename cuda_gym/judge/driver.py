"""The trusted candidate driver: every number the reward depends on is decided here.

Role `candidate` of `cuda_gym.judge.worker`. The driver builds the task's `Model` (seeded with the
init seed), starts the untrusted runner (cuda_gym.judge.runner, through
cuda_gym.judge.untrusted.launch_untrusted) which builds `ModelNew` the same way, and then, call by
call:

- creates the call's inputs itself from a secret seed (fresh values for every correctness
  trial, the repeat, every warm-up and every timed call) and hands them over only with the call
  (cuda_gym.judge.handover); owns the output buffers, poisoned before each call;
- computes the reference's outputs and compares (strict mode against float64), checks the
  inputs against its pristine copy, and the repeat of trial 0 for determinism;
- times each call on the host clock from go to the runner's "done" (forward returned and
  synchronised), minus the fastest of empty calls taken through the same steps
  (`Served.measure_transport`); on CUDA the runner is "primed" first (one tiny kernel of its
  own, outside the window), so the device's switch from the driver's context to the runner's
  is not timed; and the rest of the call (checks, outputs handed over) apart,
  for the judge to compare with the baselines'; warm-up and timed call counts are random,
  and a random, unannounced subset of timed calls is re-checked against the reference;
- times the eager and torch.compile baselines through the same path (a runner serving the
  task's own Model), so the comparison is fair.

What the runner reports is untrusted and can only make a verdict worse: its fallback-ban and
thread reports (a reported violation rejects), its profiler table (a cross-check and the
agent's table, never a speedup). The remaining in-process risk: candidate code in the runner's
process can suppress the ban's report (e.g. patch the runner's reply); the trusted answers to
that are the symbol check of the candidate's native code (cuda_gym.judge.native_checks), the
own-kernel call count, and on CUDA the profile's kernel origins - each of which the OS sandbox
and a native-code review strengthen, none of which is airtight against code in the same process.
"""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path
from time import perf_counter

import torch

from cuda_gym.errors import is_out_of_memory
from cuda_gym.judge import cpu_time, roles
from cuda_gym.judge.compare import Comparison, check_outputs_match, runs_agree
from cuda_gym.judge.config import FIRST_CALL_EXTRA_S, samples_host_cpu
from cuda_gym.judge.contract import strict_scales
from cuda_gym.judge.cpu_time import CpuWatch
from cuda_gym.judge.device_use import judgement_bytes
from cuda_gym.judge.fallback import ALLOWED_OPS, COPY_OPS, VENDOR_LIBRARY_OPS
from cuda_gym.judge.handover import Handover
from cuda_gym.judge.inputs import forward_seed, make_inputs, seed_forward
from cuda_gym.judge.native_checks import candidate_objects, symbol_violations
from cuda_gym.judge.output_checks import bitwise_equal
from cuda_gym.judge.protocol import (
    BaselineResult,
    CandidateRequest,
    CandidateResult,
    ComparisonResult,
    KernelSummary,
    TimingStats,
)
from cuda_gym.judge.static_checks import reference_state
from cuda_gym.judge.timing import L2_FLUSH_BYTES, kernel_origin
from cuda_gym.judge.untrusted import RunnerFailed, RunnerLink, runner_sandbox
from cuda_gym.judge.verdict import ViolationKind, format_violation, violation_kind
from cuda_gym.runtime.perf_sampling import PerfUnavailable

ROUND_TRIP_CALLS = 20
# Set to 1: timed calls also ask the runner for forward's time between its own CUDA events,
# reported as TimingStats.runner_event_ms to compare with the host clock (never scored).
TRACE_EVENTS_ENV = "CUDA_GYM_TRACE_EVENTS"
# A traced call's host time, split at the runner's marks (TimingStats.runner_trace_ms).
TRACE_SEGMENTS = ("to_runner", "before_forward", "forward_host", "synchronise", "to_done")
# On CUDA driver and runner poll this long for each other's next message before sleeping: a
# sleeping process's wake-up (0.1-0.3 ms on the H200) would otherwise count in calls of 1 ms.
SPIN_S = 0.02
WARMUP_MIN_S = 0.3  # on CUDA: the clocks of an idle GPU ramp up first
FLUSH_OVERLAP_FACTOR = 0.25
FLUSH_SLACK_MS = 0.02
# At least one timed call in RECHECK_EVERY is re-checked (random ones), and never fewer than
# MIN_RECHECKS: a solution that can tell a timed call from a correctness trial and answers
# garbage fast in more than half of the timed calls (to pull the median down) passes with
# probability under 0.5 ** MIN_RECHECKS (1.6 %). A kept call's outputs wait on the host until
# the timing ends, and its inputs are drawn again from their seed for the check (where the
# task's get_inputs draws the same inputs from the same seed; else they are kept too, on the
# device): at most RECHECK_BYTES of them, and never fewer than 2.
RECHECK_EVERY = 4
MIN_RECHECKS = 6
RECHECK_BYTES = 4 << 30
# Timing takes about this long at most: slower calls get fewer timed runs, never fewer than
# MIN_TIMED_RUNS (the runner's whole budget, JudgeConfig.run_timeout_s, still bounds it).
TIMING_BUDGET_S = 30.0
# On the CPU a forward too short for the sampler to say where its time went gets more calls
# (untimed, fresh inputs, before its samples are judged), ten at a time, until CENSUS_SAMPLES
# samples after its first call, for at most the request's census_s: a tiny task's copies, or
# its Python, are otherwise a handful of 2 ms samples in the judgement's calls.
CENSUS_SAMPLES = 120
CENSUS_MAX_CALLS = 400
# ... and at least this many calls, for at most CENSUS_LATE_FACTOR times census_s: on a busy
# machine the census's seconds hold fewer calls (a small task's census: 110 calls alone on the
# 2-core VM, 60 beside two busy loops), and what it can see of a small task is per call.
CENSUS_MIN_CALLS = 150
CENSUS_LATE_FACTOR = 3
# A forward with a sample in someone else's compute (torch_compute, foreign) that the rules do
# not refuse yet is looked at longer: up to this many samples, in CENSUS_LATE_FACTOR times the
# census's time. A small task's whole GEMM done by MKL is a few samples per hundred calls
# (2 to 12 per 110 on the 2-core VM; under load once too few: the CI of d20a7e2 accepted it).
# Honest code has no such sample (the false-rejection corpus: none), so it pays nothing.
CENSUS_SUSPECT_SAMPLES = 240
CENSUS_SUSPECT_MAX_CALLS = 1200
# ... and at least this many calls however soon the samples are there: own code spinning beside
# a little foreign compute fills the sample count in a few calls, and what the rules can see of
# the compute is per call (red-team round 21: 2 NumPy samples beside 288 own in 36 calls).
CENSUS_SUSPECT_MIN_CALLS = 400
MIN_TIMED_RUNS = 5
# A profiled kernel time this far from the measured time is flagged (the profile is untrusted).
PROFILE_MISMATCH_FACTOR = 1.5
# Host escapes of tensor data from Python (torch.tensor(list) is aten::lift_fresh of host data).
REFUSED_OPS = frozenset({"aten::lift_fresh"})
NO_OWN_KERNEL = format_violation(
    ViolationKind.NO_OWN_KERNEL,
    "ModelNew.forward called none of the solution's own compiled functions"
    " (outputs made by PyTorch's allowed copy and view ops alone)",
)


class CandidateFailed(Exception):
    """The candidate's forward raised, or its runner failed: the verdict's error."""


class Served:
    """One runner serving one model, and the driver's calls into it."""

    def __init__(
        self, link: RunnerLink, device: str, limit=None, first_extra_s: float = FIRST_CALL_EXTRA_S
    ) -> None:
        self.link = link
        self.device = device
        # Seconds one call may take (a function: the reference's time is measured as we go);
        # None: only the runner's whole budget bounds a call.
        self.limit = limit
        self.first_extra_s = first_extra_s
        self.calls = 0
        self.handover = Handover(device, self._share)
        self.violations: list[str] = []
        self.own_calls = 0
        self.expected: list = []  # a baseline's: the reference's outputs on its first inputs
        self.call_s: list[float] = []  # the untimed calls' round trips, seconds
        self.transport_ms = 0.0  # the fastest empty call's round trip (measure_transport)
        self.trace_events = device == "cuda" and os.environ.get(TRACE_EVENTS_ENV) == "1"
        self.event_ms: list[float] = []  # the runner's own figures of traced calls
        self.trace: list[list[float]] = []  # their host time by segment, ms (TRACE_SEGMENTS)
        self.watch: CpuWatch | None = None  # where forward's CPU time goes (judge/cpu_time.py)

    def _share(self, message: dict, fds: tuple[int, ...]) -> None:
        self.link.send(message, fds)
        self.link.receive(self._limit(first=True))

    def _limit(self, first: bool = False) -> float | None:
        """The limit of the next call: the first call and profiled ones get more."""
        if self.limit is None:
            return None
        if self.calls <= 1:
            return self.limit() + self.first_extra_s
        return self.limit() + (FIRST_CALL_EXTRA_S if first else 0.0)

    def close(self) -> None:
        """Stop the runner, then free the call buffers lent to it."""
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        self.link.close()
        self.handover.close()

    def call(
        self,
        inputs: list,
        expected: list,
        fseed: int,
        kind: str = "call",
        runs: int = 0,
        count: bool = False,
    ):
        """Run one untimed call on `inputs` (the driver's, left pristine): (outputs, reply).

        With `count`, the runner counts the solution's own extension calls (a profile hook,
        which forward can see: only the repeat of trial 0 is counted, so the hook tells forward
        nothing about which calls are trials and which are timed).
        """
        self.calls += 1
        fields, fds = self.handover.prepare(inputs, expected)
        message = {"call_id": self.calls, "kind": kind, "forward_seed": fseed, **fields}
        message["profile_runs"] = runs
        message["count_own_calls"] = count
        if self.device == "cuda":
            torch.cuda.synchronize()
        start = perf_counter()
        with self._window(kind in ("call", "profile")):
            reply = self.link.call(message, fds, self._limit(first=kind == "profile"))
        if kind == "call":
            self.call_s.append(perf_counter() - start)
        return self._finish(reply)

    def _window(self, forward: bool, timed: bool = False):
        """Where the CPU watch (if any) counts samples: the calls that run forward."""
        if self.watch is None or not forward:
            return contextlib.nullcontext()
        return self.watch.window(timed, done=lambda: self.link.done_ns)

    def typical_call_s(self) -> float | None:
        """Seconds of an untimed call past the first; None before the second.

        The first loads and compiles lazily (a compile baseline's takes minutes).
        """
        later = self.call_s[1:]
        return statistics.median(later) if later else None

    def _finish(self, reply):
        self.violations += [v for v in reply.violations if v not in self.violations]
        self.own_calls += reply.own_calls
        outputs, mutated = self.handover.collect(reply.values)
        if mutated:
            note = format_violation(
                ViolationKind.INPUT_MUTATED, "ModelNew.forward modified one of its inputs"
            )
            if note not in self.violations:
                self.violations.append(note)
        if reply.error is not None:
            raise CandidateFailed(reply.error)
        return outputs, reply

    def timed_call(self, inputs: list, expected: list, fseed: int, flush) -> tuple:
        """One call timed on the host clock: (outputs, host ms, flush ms, finish ms).

        host: from sending the call to the runner's "done" (forward returned and synchronised);
        finish: from "done" to the reply, the outputs in the driver's slots.
        """
        self.calls += 1
        fields, fds = self.handover.prepare(inputs, expected)
        message = {"call_id": self.calls, "kind": "call", "forward_seed": fseed, **fields}
        if self.trace_events:
            message["events"] = True
        flush_ms = flush() if flush is not None else 0.0
        if self.device == "cuda":
            # The device switches to the runner's context now, not inside the window.
            self.link.prime(self._limit())
        with self._window(True, timed=True):
            reply, to_done_s, finish_s = self.link.timed_call(message, fds, self._limit())
        outputs, _ = self._finish(reply)
        if reply.event_ms is not None:
            self.event_ms.append(reply.event_ms)
        if reply.marks is not None and len(reply.marks) == len(TRACE_SEGMENTS) - 1:
            sent = self.link.sent_at
            points = [sent, *reply.marks, sent + to_done_s]
            self.trace.append([1e3 * (b - a) for a, b in zip(points, points[1:])])
        return outputs, to_done_s * 1e3, flush_ms, finish_s * 1e3

    def trace_ms(self) -> dict[str, float] | None:
        """Medians of the traced calls' host time by segment (TRACE_SEGMENTS); None untraced."""
        if not self.trace:
            return None
        return {
            name: statistics.median(row[k] for row in self.trace)
            for k, name in enumerate(TRACE_SEGMENTS)
        }

    def measure_transport(self, limit_s: float | None, banned: bool = False) -> None:
        """Time empty calls into the runner before it loads anything: `transport_ms`.

        An empty call goes through a call's steps up to "done" with nothing in forward (the
        fallback ban's guard too when `banned`); the fastest one's time is subtracted from
        every timed call. Measured here, while the runner holds no code of the candidate's,
        nothing in it can stall these calls (a thread holding the GIL, say) to make every timed
        call look faster by the stall.

        The fastest, not the median: the runner starts while others may be starting or building
        beside it, and a busy host slows these calls, never speeds them up. A median taken then
        was subtracted in full from calls timed later on a quiet host, and a microsecond
        kernel's calls could read 0 ms.
        """
        trips = []
        for k in range(ROUND_TRIP_CALLS):
            message = {"call_id": -1 - k, "kind": "null", "banned": banned}
            # Timed as a call is timed: from sending it to its "done".
            _, trip_s, _ = self.link.timed_call(message, (), limit_s)
            trips.append(trip_s * 1e3)
        self.transport_ms = min(trips)

    @staticmethod
    def flush_alone_ms(flush) -> float:
        """Median ms of the L2 flush with nothing else running (0 without a flush)."""
        if flush is None:
            return 0.0
        return statistics.median(flush() for _ in range(ROUND_TRIP_CALLS))


class Flush:
    """The driver's L2 flush on its own stream, timed with its events (CUDA)."""

    def __init__(self) -> None:
        self.buf = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self.stream = torch.cuda.Stream()

    def __call__(self) -> float:
        """Flush once, after the driver's own writes (the inputs) are done; its GPU time in ms.

        On its own stream, so only work of other processes (or of the runner, left running
        after it answered) can slow it down.
        """
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            start.record()
            self.buf.zero_()
            end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)


class Driver:
    """Judges one solution for a CandidateRequest (see the module docstring)."""

    def __init__(self, req: CandidateRequest, rep: roles.Reporter) -> None:
        self.req = req
        self.rep = rep
        self.device = req.header.device
        self.work = Path(req.header.result_path).parent
        self.result = CandidateResult()
        self.rng = secrets.SystemRandom()
        self.reference_s: float | None = None  # the fastest reference forward measured
        # In a directory of its own, which the runners' sandboxes see (read-only).
        self.init_path = self.work / "init" / "init.pt"
        self._early: Served | Exception | None = None  # launch_candidate's runner
        self.unsampled: list[str] = []  # baselines whose runner could not be sampled (CPU)
        self.census_calls = 0  # calls made for the CPU sampler alone (_census)

    # -- set-up ---------------------------------------------------------------------------------

    def _setup(self) -> None:
        req = self.req
        self.rep.enter("setup")
        self.result.numerics = roles.pin_numerics()
        self.task = roles.import_file("reference_task", req.header.task_path)
        init_args = list(self.task.get_init_inputs())
        torch.manual_seed(req.init_seed)
        with torch.device(self.device):
            self.model = self.task.Model(*init_args).to(self.device)
        use64 = req.tolerance_mode == "strict" and req.fp64_ok
        self.model64 = copy.deepcopy(self.model).double() if use64 else None
        for model in (self.model, self.model64):
            if model is not None:
                roles.fresh_state_each_call(model)
        self.init_path.parent.mkdir(exist_ok=True)
        weights = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        # Its state beside the weights (a recurrent cell's initial hidden state, drawn on the
        # device here and on the CPU in the runner): the runner copies it in as it does them.
        state = {k: v.detach().cpu() for k, v in roles.state_tensors(self.model).items()}
        # Names its forward stores that __init__ did not set: the runner restores them too.
        stored = reference_state(Path(req.header.task_path).read_text())
        state.update({name: None for name in stored if name not in state})
        torch.save({"init_args": init_args, "weights": weights, "state": state}, self.init_path)

    def launch_candidate(self) -> None:
        """Start the solution's runner process now, before the worker waits for the device.

        Its start (a sandboxed Python importing torch: seconds of host work) then overlaps the
        worker's waits for device memory and the gate and the driver's set-up; it loads nothing
        until the driver serves it. A failure to start is raised where it is served.
        """
        req = self.req
        try:
            self._early = self._launch(
                req.solution_dir, req.module_dir, "candidate", req.runner_timeout_s, True
            )
        except Exception as exc:  # raised in `_serve`, as a runner started there would
            self._early = exc

    def close_early(self) -> None:
        """Stop a runner `launch_candidate` started that was never served."""
        if isinstance(self._early, Served):
            self._early.close()
        self._early = None

    def _launch(
        self, solution_dir: str, module_dir, role: str, budget_s: float, candidate: bool
    ) -> Served:
        """Start a runner process for `solution_dir` (in its sandbox); it loads nothing yet."""
        work = self.work / f"runner-{role.replace(' ', '-')}-{secrets.token_hex(4)}"
        work.mkdir()
        env = roles.runner_env()
        env["TORCH_EXTENSIONS_DIR"] = str(work / "torch_extensions")  # its own, never shared
        if candidate and self.req.extensions_dir:
            shutil.copytree(self.req.extensions_dir, work / "torch_extensions")
        sandbox = None
        if self.req.sandbox:
            # The init file's directory, not the file: the runner may start before it is written.
            self.init_path.parent.mkdir(exist_ok=True)
            readable = tuple(p for p in (solution_dir, module_dir, str(self.init_path.parent)) if p)
            if candidate and self.req.thread_ban:  # the judge's library (judge/thread_ban.py)
                readable += (str(Path(self.req.thread_ban).parent),)
            sandbox = runner_sandbox(
                work, self.device, readable, self.req.sandbox_data_bytes, budget_s
            )
        spin_s = SPIN_S if self.device == "cuda" else 0.0
        link = RunnerLink(
            work, env, budget_s, role, sandbox, spin_s, fork_server=self.req.header.fork_server
        )
        if link.forked:
            self.rep.follow(link.proc.pid)  # not a child of this process: counted apart
        self.result.runners_forked += link.forked
        return Served(
            link,
            self.device,
            self._call_limit_s if candidate else None,
            self.req.first_call_extra_s if candidate else FIRST_CALL_EXTRA_S,
        )

    def _serve(
        self,
        solution_dir: str,
        module_dir,
        banned: bool,
        compile_model: bool,
        role: str,
        budget_s: float,
        load_limit_s: float | None = None,
        candidate: bool = False,
    ) -> Served:
        """A runner serving the model of `solution_dir`, ready for calls.

        candidate: the solution's runner (the one `launch_candidate` started, if it did): its
        torch extensions (built by the judge's build stage) are copied where its torch looks
        for them, it compiles only where the request allows, and each call is limited by the
        reference's time (`_call_limit_s`).
        """
        allowed = set(ALLOWED_OPS) - REFUSED_OPS
        if self.req.allow_vendor_libraries:
            allowed |= VENDOR_LIBRARY_OPS
        if self.req.data_movement and banned:
            # The task is a transpose, a pad, a concatenation: PyTorch's copies would be its
            # whole computation (and an extension's thread could call them unseen by the ban).
            allowed -= COPY_OPS
        early = self._early if candidate else None
        if candidate:
            self._early = None
        if isinstance(early, Exception):
            raise early
        served = early or self._launch(solution_dir, module_dir, role, budget_s, candidate)
        link = served.link
        stage = self.rep.stage
        try:
            # The runner's start (importing torch: seconds) holds no gate; a timer waiting for
            # the device waits for none of it.
            with roles.off_device(self.rep, "runner"):
                link.wait_started(load_limit_s)
                served.measure_transport(load_limit_s, banned)
                if samples_host_cpu(self.device):
                    # Before the runner holds any code of the solution's; baselines are sampled
                    # as well, so that sampling slows every timed side alike.
                    self._watch(served, check=candidate and banned, role=role)
            self.rep.enter(stage)
            # A baseline's load holds no gate either: the task's own Model, built and its
            # weights copied in, and for the compile baseline torch.compile's stack imported
            # (seconds of host work; on the H100 timers' drains waited 58 s in all for
            # baselines in that stage, rl_load_h100.json). A candidate's load holds it: its
            # code may run kernels there.
            loading = contextlib.nullcontext() if candidate else roles.off_device(self.rep, stage)
            with loading:
                ready = link.start(
                    {
                        "solution_dir": solution_dir,
                        "module_dir": module_dir,
                        "device": self.device,
                        "init_seed": self.req.init_seed,
                        "init_path": str(self.init_path),
                        "banned": banned,
                        "allowed_ops": sorted(allowed),
                        # The ban on the solution's other threads and on what runs inside an
                        # allowed op (judge/thread_ban.py); on a vendor task a GEMM's insides pass
                        # (a convolution's bias add, OpenMP's threads).
                        "thread_ban": self.req.thread_ban if candidate and banned else None,
                        "thread_ban_opaque": (
                            sorted(VENDOR_LIBRARY_OPS) if self.req.allow_vendor_libraries else []
                        ),
                        "compile_model": compile_model,
                        "compile_extensions": self.req.compile_extensions or not candidate,
                    },
                    load_limit_s,
                )
        except RunnerFailed:
            served.close()
            raise
        if ready.error is not None:
            served.close()
            if candidate:
                self.result.build_failed = ready.build_failed
                found = [v for v in ready.violations[:20] if v not in self.result.violations]
                self.result.violations += found
            raise CandidateFailed(ready.error)
        if candidate:
            self.result.weights_not_copied = ready.weights_not_copied
        if served.watch is not None:
            served.watch.loaded()
        if banned:
            # What the solution's process loaded, read from outside it: its own extensions
            # (kernels/ and load_inline's) may not call compute below the dispatcher.
            judge_own = (str(Path(self.req.thread_ban).parent),) if self.req.thread_ban else ()
            for shared_object in candidate_objects(link.proc.pid, trusted_roots=judge_own):
                # Also every ATen operator it refers to beyond the allowed ones: an extension's
                # own thread or OpenMP worker calls them unseen by the ban (whose mode is per
                # thread), and on a GPU the profile that would show their kernels is taken in
                # the solution's process, which can tell a profiled call from the others.
                ops = frozenset(allowed)
                served.violations += symbol_violations(
                    shared_object, ops, vendor_allowed=self.req.allow_vendor_libraries
                )
        link.stage = "run"
        return served

    def _watch(self, served: Served, check: bool, role: str) -> None:
        """Sample a runner from outside from now on (`cuda_gym.judge.cpu_time`).

        check: the solution's runner, whose samples are judged; a baseline's are only taken
        (sampling costs the sampled process time, and every timed side pays it alike). Where
        the kernel refuses (`PerfUnavailable`), the judgement goes on without this line of
        defence and the verdict's `cpu_time` flag says why.
        """
        req = self.req
        attributor = None
        if check:
            work = str(served.link.work_dir)
            extension_dirs = (f"{work}/torch_extensions",) if req.compile_extensions else ()
            own_dirs: tuple[str, ...] = ()
            if self.device == "cuda":
                # Triton builds each kernel's launcher (host code run at every launch) into the
                # runner's cache (sandbox: TRITON_CACHE_DIR): the solution's, like its kernels.
                own_dirs += (f"{work}/triton",)
            attributor = cpu_time.Attributor(
                own_hashes=cpu_time.file_hashes(req.extensions_dir, req.module_dir),
                writable=(work, "/tmp", "/dev/shm"),
                own_dirs=own_dirs,
                extension_dirs=extension_dirs,
                library_index=req.library_index,
                judge_libraries=(req.thread_ban,) if req.thread_ban else (),
                moves_data=req.data_movement,
                vendor=req.allow_vendor_libraries,
                device=self.device,
            )
        try:
            served.watch = cpu_time.CpuWatch(served.link.proc.pid, attributor, device=self.device)
        except PerfUnavailable as exc:
            if check:
                self.result.cpu_time = {"error": str(exc)}
            else:
                self.unsampled.append(role)

    def _check_cpu(self, served: Served, correct: bool = True) -> None:
        """Add the CPU watch's findings (if any) to the violations; keep its counts.

        correct: the answers were right. A wrong one is rejected as it is: PyTorch's copies
        doing the work (no_own_kernel) is a finding about correct answers (a stored output
        cloned on every call is just incorrect).
        """
        if served.watch is None:
            return
        violations = served.watch.check(served.own_calls, self._reference_ms())
        if not correct:
            violations = [
                v for v in violations if violation_kind(v) is not ViolationKind.NO_OWN_KERNEL
            ]
        self.result.cpu_time = served.watch.total.summary()
        self.result.cpu_time["own_calls_per_forward"] = served.own_calls
        self.result.cpu_time["sampling"] = served.watch.sampling
        if served.watch.outside_s is not None:
            self.result.cpu_time["outside_calls_cpu_s"] = round(served.watch.outside_s, 3)
            self.result.cpu_time["openmp_waits_s"] = round(served.watch.openmp_waits_s, 3)
        if served.watch.unsampled_s is not None:
            # forward's CPU time (/proc: user mode, and all), the part no sample saw (user mode
            # per thread, all per CPU) and the mean time a sample stood for
            self.result.cpu_time["in_calls_user_s"] = round(served.watch.in_calls_user_s, 3)
            self.result.cpu_time["in_calls_cpu_s"] = round(served.watch.in_calls_cpu_s, 3)
            self.result.cpu_time["unsampled_s"] = round(served.watch.unsampled_s, 3)
            self.result.cpu_time["mean_period_ms"] = round(served.watch.mean_period_ms, 3)
        # comparisons of the solution's own code in memory with its file (0: not permitted)
        self.result.cpu_time["own_code_checks"] = served.watch.code_checks
        self.result.cpu_time["census_calls"] = self.census_calls
        if self.unsampled:
            self.result.cpu_time["unsampled_baselines"] = list(self.unsampled)
        served.violations += [v for v in violations if v not in served.violations]

    def _reference_ms(self) -> float | None:
        """The reference's fastest forward so far (measured here), ms; None before any."""
        return None if self.reference_s is None else 1e3 * self.reference_s

    def _call_limit_s(self) -> float:
        """What one call of the candidate may take: a multiple of the reference's time."""
        req = self.req
        if self.reference_s is None:
            return req.call_time_floor_s
        return max(req.call_time_floor_s, req.call_time_factor * self.reference_s)

    def _reference(
        self, inputs: list, fseed: int, exact: bool = True
    ) -> tuple[list, list | None, list | None]:
        """The reference's outputs, its float64 outputs, and strict mode's error scales.

        exact: also the float64 outputs and scales (a baseline needs only the outputs).
        """
        seed_forward(fseed)
        cloned = _clone(inputs)
        self._sync()
        start = perf_counter()
        exp = roles.as_list(self.model(*cloned))
        self._sync()
        took = perf_counter() - start
        self.reference_s = took if self.reference_s is None else min(self.reference_s, took)
        del cloned
        exp64 = scales = None
        if self.model64 is not None and exact:
            seed_forward(fseed)
            exp64 = roles.as_list(self.model64(*_to_double(inputs)))
            if self.req.strict_units:  # fp32 arithmetic's bound (judge/contract.py)
                seed_forward(fseed)
                scales = strict_scales(self.model64, inputs, self.req.strict_units)
        if self.device == "cuda":
            # The pass's temporaries (float64 ones above all) back to the device, for the
            # runner's call that follows: the driver's peak and the runner's come one after
            # the other, not on top of each other.
            torch.cuda.empty_cache()
        return exp, exp64, scales

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _memory_at(self, point: str) -> None:
        """CUDA: the driver's PyTorch memory at the end of a phase, into the result.

        "peak": the most reserved so far (it grows in the phase where the peak is), "reserved"
        and "allocated" now: where a judgement's device memory goes, phase by phase.
        """
        if self.device == "cuda":
            self.result.device_memory[point] = {
                "peak": int(torch.cuda.max_memory_reserved()),
                "reserved": int(torch.cuda.memory_reserved()),
                "allocated": int(torch.cuda.memory_allocated()),
            }

    # -- the judgement --------------------------------------------------------------------------

    def run(self) -> CandidateResult:
        """The whole judgement; the candidate's failures end up in the result, not raised."""
        req = self.req
        with torch.no_grad():
            self._setup()
            self._memory_at("setup")
            if req.baselines_only:
                self._baselines()
                self.result.stage = "done"
                return self._finish()
            self.rep.enter("load")
            # A load that may compile holds no gate: compiling is host work of minutes.
            hold = roles.off_device if req.compile_extensions else _in_gate
            try:
                with hold(self.rep, "load"):
                    served = self._serve(
                        req.solution_dir,
                        req.module_dir,
                        banned=not req.reference_as_candidate,
                        compile_model=False,
                        role="candidate",
                        budget_s=req.runner_timeout_s,
                        load_limit_s=None if req.compile_extensions else req.load_timeout_s,
                        candidate=True,
                    )
            except (CandidateFailed, RunnerFailed) as exc:
                self.result.candidate_error = str(exc)
                self.result.stage = "load"
                return self._finish()
            if self.device == "cuda":
                # What the judgement keeps between its trials: it steps out of the gate for
                # waiting timers with only that reserved (roles.make_way).
                roles.keep_memory_base([served.link.proc.pid])
            failure = None
            try:
                self._judge(served)
            except (CandidateFailed, RunnerFailed) as exc:
                failure = exc
            finally:
                served.close()
            if failure is not None:
                self.result.candidate_error = str(failure)
                self.result.stage = self.rep.stage
                self.result.violations = served.violations + self.result.violations
                return self._finish()
            self.result.stage = "done"
            if req.timing and self.result.timing is not None:
                # Timed again now that the candidate's runner (and every thread or process it
                # started) is gone: nothing of the solution's runs beside its baselines.
                again = [n for n in req.retime_baselines if n not in req.baselines]
                self._baselines([*req.baselines, *again])
        return self._finish()

    def _finish(self) -> CandidateResult:
        error = self.result.candidate_error
        if error is not None and is_out_of_memory(error):
            # Its runner is gone: what is missing now, others hold.
            self.result.memory_short = roles.memory_short(self.device, self.req.header.device_bytes)
        self.result.device_name = roles.device_name(self.device)
        self.result.gpu_state = roles.gpu_state(self.device)
        return self.result

    def _judge(self, served: Served) -> None:
        req = self.req
        self.rep.enter("run")
        trials = Comparison()
        first = None
        for k, (seed, dist) in enumerate(zip(req.seeds, req.distributions)):
            # A timer waits for one trial, not all; stepped out, only the base is reserved
            # (the last trial's tensors are gone, the runner empties its cache after them).
            roles.make_way(self.rep, self.device, idle=True)
            inputs = make_inputs(self.task, seed, self.device, dist)
            fseed = forward_seed(seed)
            exp, exp64, scales = self._reference(inputs, fseed)
            # (and for the reference's pass alone: float64 and strict scales take a while)
            roles.make_way(self.rep, self.device)
            out, _ = served.call(inputs, exp, fseed)
            if k == 0:
                # Part of "run", reported apart: what honest first calls take (lazy loading)
                # under load is what FIRST_CALL_EXTRA_S must cover.
                self.rep.stage_s["run.first_call"] = round(served.call_s[-1], 4)
            check_outputs_match(
                [exp],
                [out],
                req.tolerance_mode,
                [exp64] if exp64 is not None else None,
                into=trials,
                first_trial=k,
                scales=[scales],
            )
            if k == 0:
                # On the host until the repeat: the device memory goes to the later trials.
                # (The reference's outputs are made again below.)
                first = (_to_host(inputs), fseed, _to_host(out))
            del inputs, exp, exp64, scales, out
        self._memory_at("trials")
        inputs, fseed, out = first
        inputs = _to_device(inputs, self.device)
        roles.make_way(self.rep, self.device)
        exp, exp64, scales = self._reference(inputs, fseed)
        repeat, _ = served.call(inputs, exp, fseed, count=True)
        out = _to_device(out, self.device)
        bitwise = len(out) == len(repeat) and all(
            bitwise_equal(a, b) if isinstance(a, torch.Tensor) else a == b
            for a, b in zip(out, repeat)
        )
        agree = bitwise or runs_agree(out, repeat, req.tolerance_mode, exp, exp64, scales)
        self._memory_at("repeat")
        self.result.comparison = ComparisonResult(**vars(trials))
        self.result.deterministic = agree
        self.result.bitwise_deterministic = bitwise
        banned = not req.reference_as_candidate
        if banned and trials.correct and agree:  # (a wrong answer is rejected as it is)
            self._census(served, exp)
        self._check_cpu(served, trials.correct)
        if banned and served.own_calls == 0 and trials.correct:
            # A correct answer with no kernel of the solution's: PyTorch's allowed copy and
            # view ops did the work (a data-movement task). A wrong one is just incorrect.
            served.violations.append(NO_OWN_KERNEL)
        self.result.violations = list(served.violations)
        if self.result.violations or not trials.correct or not agree:
            return
        profiled = False
        if req.timing:
            with roles.alone(self.rep, "timing"):
                timing, kept = self._time(served, exp, recheck=True)
                if self.device == "cuda":
                    # In the same hold: CUPTI starts in milliseconds on a GPU (after timing, as
                    # it adds to every launch), and each exclusive hold costs a drain of the
                    # device's shared work (cuda_gym.runtime.device_gate).
                    self._profile(served, inputs, exp, fseed)
                    profiled = True
            if self.device == "cuda":
                # The runner's memory is still cached from the timed and profiled calls.
                props = torch.cuda.get_device_properties(torch.cuda.current_device())
                uuid = str(getattr(props, "uuid", ""))
                self.result.device_use = judgement_bytes(uuid, [served.link.proc.pid])
                self._memory_at("timing")
            self.result.violations = list(served.violations)
            self.rep.enter("recheck")
            recheck = Comparison()
            while kept:
                k = timing.rechecked_calls - len(kept)
                inputs_k, seed_k, fseed_k, out_k = kept.pop(0)
                if inputs_k is None:  # drawn again from its seed (_time)
                    inputs_k = make_inputs(self.task, seed_k, self.device, "as_is")
                out_k = _to_device(out_k, self.device)
                roles.make_way(self.rep, self.device)
                exp_k, exp64_k, scales_k = self._reference(inputs_k, fseed_k)
                check_outputs_match(
                    [exp_k],
                    [out_k],
                    req.tolerance_mode,
                    [exp64_k] if exp64_k is not None else None,
                    into=recheck,
                    first_trial=k,
                    scales=[scales_k],
                )
                del inputs_k, out_k, exp_k, exp64_k, scales_k
            self.result.timing_recheck = ComparisonResult(**vars(recheck))
            self._memory_at("recheck")
            self.result.timing = timing
            if banned:
                self._census(served, exp, after_timing=True)
            self._check_cpu(served)  # the timed calls too
            self.result.violations = list(served.violations)
        if req.profile and not profiled:
            self._profile(served, inputs, exp, fseed)

    def _census(self, served: Served, expected: list, after_timing: bool = False) -> None:
        """More untimed calls where the CPU sampler has seen too little of forward (CENSUS_*).

        after_timing: the calls after the timed ones, a random number of them (at least
        CENSUS_MIN_CALLS, whatever was sampled before). A solution that counts its calls
        cannot tell where timing ended: what it does in the timed calls it does in these too,
        where the sampler has the calls to see it (red-team round 34: MKL's GEMM in the warm-up
        and timed calls only, 0-1 samples in their 36 calls, own work padded into the trials
        so that the census before timing made no call: reward 2).
        """
        watch = served.watch
        if watch is None or watch.attributor is None or self.device != "cpu":
            return
        watch.check(served.own_calls, self._reference_ms())
        start, census_s = perf_counter(), self.req.census_s
        late = start + CENSUS_LATE_FACTOR * census_s
        floor = self.census_calls + CENSUS_MIN_CALLS if after_timing else CENSUS_MIN_CALLS

        def in_time(now: float) -> bool:
            if now < start + census_s:
                return True
            return self.census_calls < floor and now < late

        if after_timing:
            least = floor + self.rng.randint(0, CENSUS_MIN_CALLS)
            self._census_calls(served, expected, 0, least, in_time, least=least)
        else:
            # A task that only moves data: the calls, not the samples (which an own spin fills
            # in a few calls), decide what a small foreign copy shows (round 26's NumPy
            # transposes: 0 NumPy samples in one judgement's 36 calls, beside its spin).
            least = CENSUS_MIN_CALLS if self.req.data_movement else 0
            self._census_calls(
                served, expected, CENSUS_SAMPLES, CENSUS_MAX_CALLS, in_time, least=least
            )
        if watch.foreign_seen() and not watch.check(served.own_calls, self._reference_ms()):
            before = self.census_calls if after_timing else 0
            self._census_calls(
                served,
                expected,
                CENSUS_SUSPECT_SAMPLES,
                before + CENSUS_SUSPECT_MAX_CALLS,
                lambda now: now < late,
                least=before + CENSUS_SUSPECT_MIN_CALLS,
            )

    def _census_calls(
        self,
        served: Served,
        expected: list,
        want: int,
        most: int,
        in_time: Callable,
        least: int = 0,
    ) -> None:
        """Calls ten at a time until `want` samples and `least` census calls, `most`, or time.

        (in_time(now) says whether there is still time.)
        """
        watch = served.watch
        while (
            (watch.samples_after_first() < want or self.census_calls < least)
            and self.census_calls < most
            and in_time(perf_counter())
        ):
            for _ in range(10):
                seed = secrets.randbits(62)
                inputs = make_inputs(self.task, seed, self.device, "as_is")
                served.call(inputs, expected, forward_seed(seed))
                self.census_calls += 1
            watch.check(served.own_calls, self._reference_ms())

    # -- timing ---------------------------------------------------------------------------------

    def _time(self, served: Served, expected: list, recheck: bool) -> tuple[TimingStats, list]:
        """Time `served` on fresh inputs per call; (stats, the calls to re-check).

        A call to re-check is (inputs or None, seed, forward seed, outputs): None where the
        inputs are to be drawn again from the seed (outputs then wait on the host).

        Warm-up and timed call counts are random (at least the configured ones), and so is
        which timed calls are re-checked; nothing in a call tells the runner which it is.

        Each call is timed up to the runner's "done" (forward returned and synchronised); the
        time from "done" to the reply (output checks, the outputs copied into the driver's
        slots) is kept apart as `finish_ms`. A runner that says "done" early and finishes its
        work while handing over its outputs shows there: the judge charges the candidate's
        finish beyond its baselines' (cuda_gym.judge.judge).
        """
        req = self.req
        warmup = req.warmup_runs + self.rng.randint(0, max(1, req.warmup_runs))
        runs = req.timed_runs + self.rng.randint(0, max(1, req.timed_runs // 2))
        per_call = served.typical_call_s()
        if per_call:
            # A correct kernel slow enough to spend its whole budget on timing is timed with
            # fewer calls (an honest naive kernel is slow, not wrong).
            fit = int(TIMING_BUDGET_S / per_call)
            runs = min(runs, max(MIN_TIMED_RUNS, fit))
            warmup = min(warmup, max(1, fit // 8))
        count = max(MIN_RECHECKS, runs // RECHECK_EVERY) if recheck else 0
        by_seed = count > 0 and self._inputs_reproducible()
        # A kept call's outputs, or its inputs and outputs (about three times its outputs).
        kept_bytes = sum(x.nbytes for x in expected if isinstance(x, torch.Tensor))
        kept_bytes *= 1 if by_seed else 3
        if kept_bytes:
            count = min(count, max(2, RECHECK_BYTES // kept_bytes))
        rechecked = set(self.rng.sample(range(runs), min(count, runs)))
        flush = Flush() if self.device == "cuda" else None
        round_trip, flush_alone = served.transport_ms, served.flush_alone_ms(flush)
        warm_until = perf_counter() + (WARMUP_MIN_S if self.device == "cuda" else 0.0)
        k = 0
        while k < warmup or perf_counter() < warm_until:
            seed = secrets.randbits(62)
            inputs = make_inputs(self.task, seed, self.device, "as_is")
            served.timed_call(inputs, expected, forward_seed(seed), flush)
            k += 1
        host, flushes, finishes, kept = [], [], [], []
        served.event_ms.clear()  # the timed calls' only
        served.trace.clear()
        for n in range(runs):
            seed = secrets.randbits(62)
            inputs = make_inputs(self.task, seed, self.device, "as_is")
            fseed = forward_seed(seed)
            out, host_ms, flush_ms, finish_ms = served.timed_call(inputs, expected, fseed, flush)
            host.append(host_ms)
            flushes.append(flush_ms)
            finishes.append(finish_ms)
            if n in rechecked:
                held = (None, _to_host(out)) if by_seed else (inputs, out)
                kept.append((held[0], seed, fseed, held[1]))
            del inputs, out
        work = sorted(max(0.0, h - round_trip) for h in host)
        median = statistics.median(work)
        p10, p90 = work[len(work) // 10], work[(9 * len(work)) // 10]
        flush_excess = statistics.median(flushes) - flush_alone
        stats = TimingStats(
            median_ms=median,
            mean_ms=statistics.fmean(work),
            min_ms=work[0],
            max_ms=work[-1],
            spread=(p90 - p10) / median if median > 0 else 0.0,
            host_median_ms=statistics.median(host),
            round_trip_ms=round_trip,
            finish_ms=statistics.median(finishes),
            finish_min_ms=min(finishes),
            flush_ms=flush_alone,
            flush_excess_ms=flush_excess,
            side_work=flush_excess > FLUSH_OVERLAP_FACTOR * flush_alone + FLUSH_SLACK_MS,
            runs=runs,
            warmup_calls=k,
            rechecked_calls=len(kept),
            rechecked_by_seed=by_seed,
            runner_event_ms=statistics.median(served.event_ms) if served.event_ms else None,
            runner_trace_ms=served.trace_ms(),
        )
        return stats, kept

    def _inputs_reproducible(self) -> bool:
        """Whether the task's get_inputs draws the same inputs twice from one seed (bitwise)."""
        seed = secrets.randbits(62)
        first = make_inputs(self.task, seed, self.device, "as_is")
        second = make_inputs(self.task, seed, self.device, "as_is")
        return len(first) == len(second) and all(
            bitwise_equal(a, b) if isinstance(a, torch.Tensor) else a == b
            for a, b in zip(first, second)
        )

    def _profile(self, served: Served, inputs: list, expected: list, fseed: int) -> None:
        """The runner's profile of 3 calls: the agent's table; on CUDA, kernels by origin."""
        if self.device == "cuda":
            served.call(inputs, expected, fseed, kind="profile", runs=1)  # CUPTI starts
        with roles.alone(self.rep, "profile"):
            _, reply = served.call(inputs, expected, fseed, kind="profile", runs=3)
        rows = [r for r in reply.profile_rows if _is_row(r)]
        self.result.profile_table = _table(rows, 3, self.device)
        if self.device != "cuda" or not rows:
            return
        vendor = self.req.allow_vendor_libraries
        by_origin = {"own": 0.0, "torch": 0.0, "vendor": 0.0, "memory": 0.0}
        foreign = []
        for name, _, total_ms in rows:
            origin = kernel_origin(name, vendor)
            by_origin[origin] += total_ms
            if origin in ("torch", "vendor"):
                foreign.append(name[:120])
        kernels = by_origin["own"] + by_origin["torch"] + by_origin["vendor"]
        self.result.kernels = KernelSummary(
            kernel_ms_per_call=sum(r[2] for r in rows) / 3,
            own_ms=by_origin["own"] / 3,
            torch_ms=by_origin["torch"] / 3,
            vendor_ms=by_origin["vendor"] / 3,
            own_share=by_origin["own"] / kernels if kernels > 0 else None,
            foreign=foreign[:5],
        )

    def _baselines(self, names: list[str] | None = None) -> None:
        """Time baselines (default: the request's) through runners serving the task's Model.

        Each runner's first call (torch.compile compiles there: host work of seconds) runs
        outside the gate, so that no timer waits for it, and the timing follows from there,
        alone, without taking the shared hold back in between (behind every timer queued by
        then: seconds a baseline, on a busy GPU).
        """
        for name in self.req.baselines if names is None else names:
            served = self._serve_baseline(name)
            if served is None:
                continue
            try:
                with roles.off_device(self.rep, f"baseline:{name}"):
                    if self._first_call(name, served):
                        with roles.alone(self.rep, f"baseline:{name}"):
                            self._time_baseline(name, served)
            finally:
                served.close()

    def _first_call(self, name: str, served: Served) -> bool:
        """Make a served baseline's first call; whether it answered (else: its error)."""
        seed = secrets.randbits(62)
        inputs = make_inputs(self.task, seed, self.device, "as_is")
        try:
            served.call(inputs, served.expected, forward_seed(seed))
        except (CandidateFailed, RunnerFailed) as exc:
            self.result.baselines[name] = BaselineResult(error=str(exc)[:2000])
            return False
        return True

    def _serve_baseline(self, name: str) -> Served | None:
        """A runner serving the task's own Model as baseline `name`, its first call to make.

        None when it could not start (the error is the baseline's result).
        """
        req = self.req
        solution = self.work / "baseline_solution"
        if not solution.is_dir():
            solution.mkdir()
            source = Path(req.header.task_path).read_text()
            (solution / "model_new.py").write_text(source.rstrip() + "\n\n\nModelNew = Model\n")
        self.rep.enter(f"baseline:{name}")
        try:
            served = self._serve(
                str(solution),
                None,
                banned=False,
                compile_model=name == "compile",
                role=f"{name} baseline",
                budget_s=req.baseline_timeout_s,
            )
        except (CandidateFailed, RunnerFailed) as exc:
            self.result.baselines[name] = BaselineResult(error=str(exc)[:2000])
            return None
        roles.make_way(self.rep, self.device)  # (between the load and the reference pass)
        seed = secrets.randbits(62)
        inputs = make_inputs(self.task, seed, self.device, "as_is")
        # (the outputs' shapes and dtypes for the call's slots: no float64 pass)
        served.expected, _, _ = self._reference(inputs, forward_seed(seed), exact=False)
        return served

    def _time_baseline(self, name: str, served: Served) -> None:
        """Time a served baseline (the caller holds the device alone) into the result."""
        try:
            timing, _ = self._time(served, served.expected, recheck=False)
            self.result.baselines[name] = BaselineResult(timing=timing)
        except (CandidateFailed, RunnerFailed) as exc:
            self.result.baselines[name] = BaselineResult(error=str(exc)[:2000])


@contextlib.contextmanager
def _in_gate(rep: roles.Reporter, stage: str):
    """Run the block in `stage` under the hold the driver already has."""
    rep.enter(stage)
    yield


def _is_row(row) -> bool:
    return (
        len(row) == 3
        and isinstance(row[0], str)
        and type(row[1]) is int
        and type(row[2]) is float
        and row[2] >= 0
    )


def _table(rows: list, runs: int, device: str, top: int = 12) -> str:
    if not rows:
        return "(the profiler recorded no device activity)"
    grand = sum(r[2] for r in rows) or 1.0
    kind = "GPU kernel" if device == "cuda" else "CPU operator"
    lines = [f"{'share':>6}  {'total ms':>9}  {'calls':>5}  {kind} (over {runs} calls)"]
    for name, count, total_ms in rows[:top]:
        short = name if len(name) <= 90 else name[:87] + "..."
        lines.append(f"{100 * total_ms / grand:5.1f}%  {total_ms:9.3f}  {count:5d}  {short}")
    if len(rows) > top:
        rest = sum(r[2] for r in rows[top:])
        lines.append(f"{100 * rest / grand:5.1f}%  {rest:9.3f}  {'':5}  ({len(rows) - top} more)")
    return "\n".join(lines)


def _clone(inputs: list) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _to_host(values: list) -> list:
    return [x.cpu() if isinstance(x, torch.Tensor) else x for x in values]


def _to_device(values: list, device: str) -> list:
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in values]


def _to_double(inputs: list) -> list:
    return [
        x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs
    ]


def run_candidate(req: CandidateRequest, rep: roles.Reporter) -> CandidateResult:
    """The `candidate` role: judge the solution, return what was decided."""
    return Driver(req, rep).run()
