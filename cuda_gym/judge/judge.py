"""The judge: build, check correctness, time against baselines, and return a Verdict.

Static checks and the build run first (cuda_gym.judge.static_checks, build). Then one trusted
worker, the candidate driver (cuda_gym.judge.driver), decides everything the reward depends on:
it computes the reference's outputs, hands each call's fresh inputs to the solution's untrusted
runner (cuda_gym.judge.runner, a process of its own that imports nothing of the judge),
compares, and times the candidate and the baselines from outside that process. Requests and
results cross process boundaries as the dataclasses of cuda_gym.judge.protocol.
"""

from __future__ import annotations

import contextvars
import dataclasses
import errno
import json
import logging
import math
import os
import secrets
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from cuda_gym.errors import WorkerError, is_out_of_memory
from cuda_gym.judge import library_copies, thread_ban
from cuda_gym.judge.baselines import JsonCache, baseline_key, has_baselines, probe_key
from cuda_gym.judge.build import build_kernels
from cuda_gym.judge.config import MIN_OWN_KERNEL_SHARE, JudgeConfig, first_call_extra_s
from cuda_gym.judge.contract import trial_distribution
from cuda_gym.judge.device import device_info
from cuda_gym.judge.inline_build import InlineBuild, build_inline, builds_extensions
from cuda_gym.judge.inputs import DISTRIBUTIONS
from cuda_gym.judge.protocol import CandidateResult, KernelSummary, TimingStats, decode
from cuda_gym.judge.roofline import SOL_SLACK
from cuda_gym.judge.static_checks import (
    check_native_sources,
    check_solution_source,
    compiles_at_first_call,
    reference_state,
    string_constants,
)
from cuda_gym.judge.transfer import remove_stale
from cuda_gym.judge.untrusted import runner_env_for, runner_python_flags
from cuda_gym.judge.verdict import (
    BuildResult,
    Flag,
    Verdict,
    ViolationKind,
    compute_reward,
    format_violation,
)
from cuda_gym.runtime import python_child_env, run_process
from cuda_gym.runtime.fork_server import shared_fork_server
from cuda_gym.runtime.process import Pause
from cuda_gym.runtime.sandbox import GiB, check_support
from cuda_gym.runtime.slots import build_slot, current_gpu
from cuda_gym.runtime.zygote import shared_launcher
from cuda_gym.tasks import Task

logger = logging.getLogger(__name__)

SOLUTION_FILE = "model_new.py"
KERNELS_DIR = "kernels"


WORKER_PRELOAD = "cuda_gym.judge.worker:preload"
# Every worker role (build, probe, candidate = the trusted driver) runs trusted code; candidate
# code runs only in the driver's runners, each in the OS sandbox (judge/untrusted.py). The build
# does not import the extension it built, so no static initialiser of the candidate's runs there.
# A worker's files are read only when they are regular files of at most this size.
MAX_RESULT_BYTES = 64 << 20
PROBE_TIMEOUT_S = 120.0
# A worker's stages spent waiting for its device (the gate, or memory in the ledger): its time
# limit does not run meanwhile (up to gate_wait_max_s).
WAITING_STAGES = ("gate", "memory")
# A profiled kernel time this many times the measured time is flagged (the profile is untrusted).
PROFILE_MISMATCH_FACTOR = 1.5
_PROBE_LOCKS: dict[str, threading.Lock] = {}
_PROBE_LOCKS_GUARD = threading.Lock()
# Baselines that could not be timed, by key: not retried by every judgement of this process.
_BASELINE_FAILURES: dict[str, dict] = {}
# The GPU memory judgements of a task held (its probe's key -> peak bytes, NVML's count of the
# driver and its runners, cuda_gym.judge.device_use): the next ones reserve from it
# (device_bytes_for). Tasks whose reservation from it ran out of memory reserve the estimate.
_DEVICE_USE: dict[str, int] = {}
_DEVICE_USE_REFUSED: set[str] = set()
_DEVICE_USE_GUARD = threading.Lock()
# Entered around a judgement's device phase (after its builds); yields the seconds it waited.
DeviceSlot = Callable[[], AbstractContextManager[float]]


class Judge:
    """Judges solutions to tasks on one device.

    Args:
        config: How to judge; `config.device` selects CUDA or C++ (CPU) kernels.
    """

    def __init__(self, config: JudgeConfig | None = None) -> None:
        self.config = config or JudgeConfig()
        self.info = device_info(self.config.device)
        self._baselines = JsonCache(self.config.resolved_cache_dir, "baselines")
        self._probes = JsonCache(self.config.resolved_cache_dir, "probes")

    # -- public API -------------------------------------------------------------------------

    def build(self, solution_dir: str | os.PathLike) -> BuildResult:
        """Build `solution_dir/kernels` (a snapshot is taken first), under a build slot.

        The kernels' sources pass the same checks as in a judgement first (includes only of
        the workspace and the toolchain, no file read by the assembler, ...): a build that
        would break them is not run (its compiler errors could quote any file).
        """
        with tempfile.TemporaryDirectory(prefix="cuda_gym_build_") as tmp, build_slot() as waited:
            snap = _snapshot(Path(solution_dir), Path(tmp))
            found = kernels_violations(snap / KERNELS_DIR)
            if found:
                text = "\n".join(found)
                return BuildResult(ok=False, module_dir=None, log=text, errors=text, wait_s=waited)
            build = build_kernels(snap / KERNELS_DIR, self.config, self.info.arch)
            return dataclasses.replace(build, wait_s=waited)

    def evaluate(
        self,
        task: Task,
        solution_dir: str | os.PathLike,
        *,
        timing: bool = True,
        profile: bool = False,
        device_slot: DeviceSlot | None = None,
    ) -> Verdict:
        """Judge the solution in `solution_dir` (model_new.py + kernels/) against `task`.

        Args:
            task: The task, specialised for this judge's device (or raw; it is specialised here).
            solution_dir: Directory holding `model_new.py` and optionally `kernels/`.
            timing: Time the candidate and the baselines and compute speedups.
            profile: Also return a table of the candidate's top kernels/operators.
            device_slot: Entered once the solution is built, around the device phase (e.g. a
                `JudgeSlots.hold`): builds never hold it. Its waits are in `stage_times_s`
                ("wait.build", "wait.slot").

        Returns:
            The Verdict. Failures of the candidate are in the verdict; only infrastructure
            failures raise (WorkerError).
        """
        return self._evaluate(
            task, Path(solution_dir), timing=timing, profile=profile, device_slot=device_slot
        )

    def evaluate_reference_as_candidate(self, task: Task, *, timing: bool = True) -> Verdict:
        """Sanity run: judge the task's own `Model` as if it were the candidate.

        It measures the harness's overhead and noise: a correct verdict whose speedups sit at
        1.0. For this run only, the PyTorch-op ban is lifted and the static checks are skipped,
        because the candidate *is* the reference; the candidate is written here from the
        task's source (`ModelNew = Model`), so no caller-supplied code ever runs unbanned.
        `evaluate` (the only path the env and its tools use) has no way to lift the ban.

        Args:
            task: The task whose reference is judged against itself.
            timing: Time the reference-as-candidate and the baselines.

        Returns:
            The Verdict, with `flags["reference_as_candidate"]` set.
        """
        return self._evaluate(task, None, timing=timing, profile=False)

    def _evaluate(
        self,
        task: Task,
        solution_dir: Path | None,
        *,
        timing: bool,
        profile: bool,
        device_slot: DeviceSlot | None = None,
    ) -> Verdict:
        """Judge `solution_dir`, or with None the task's reference as its own candidate."""
        start = time.monotonic()
        cfg = self.config
        if task.device == "any":
            task = task.for_device(cfg.device)
        verdict = Verdict(
            tolerance_mode=cfg.tolerance_mode,
            reward_kind=cfg.reward,
            device=cfg.device,
            device_name=self.info.name,
        )
        reference_as_candidate = solution_dir is None
        scratch = _scratch_prefix("judge")
        with tempfile.TemporaryDirectory(prefix=scratch, dir=_scratch_dir()) as tmp:
            tmp_path = Path(tmp)
            if reference_as_candidate:
                snap = tmp_path / "solution"
                snap.mkdir()
                (snap / SOLUTION_FILE).write_text(task.source.rstrip() + "\n\n\nModelNew = Model\n")
                verdict.flags[Flag.REFERENCE_AS_CANDIDATE] = True
            else:
                not_copied: list[str] = []
                snap = _snapshot(solution_dir, tmp_path / "solution", not_copied)
                if not_copied:
                    verdict.flags[Flag.NOT_COPIED] = not_copied[:MAX_NOT_COPIED]
            self._judge(
                task,
                snap,
                tmp_path,
                verdict,
                timing=timing,
                profile=profile,
                reference_as_candidate=reference_as_candidate,
                device_slot=device_slot,
            )
        if verdict.violations:
            verdict.correct = False
        verdict.reward = compute_reward(
            cfg.reward,
            verdict.correct,
            verdict.speedup_vs_eager,
            verdict.speedup_vs_compile,
            cfg.reward_margin,
            verdict.flags.get(Flag.TIMING_NOISE),
        )
        verdict.verdict = "accept" if verdict.correct else "reject"
        if not cfg.sandboxed:
            verdict.flags[Flag.UNSANDBOXED] = True
            _warn_unsandboxed()
        verdict.duration_s = time.monotonic() - start
        return verdict

    def _probe_key(self, task: Task) -> str:
        """The key of `task`'s probe (and of what its judgements used of the device)."""
        if task.device == "any":
            task = task.for_device(self.config.device)
        return probe_key(task.content_hash, self.info)

    def probe_task(self, task: Task, run: dict | None = None) -> dict:
        """The task's probe, cached: usable input distributions, fp64 support, trivial answers.

        run: when given and the probe is not cached, it receives the probe worker's run
        ("duration_s", and its "result" with the stage times and peak memory).
        """
        if task.device == "any":
            task = task.for_device(self.config.device)
        key = self._probe_key(task)
        probe = self._probes.get(key)
        if probe is not None:
            return probe
        # One probe per task at a time, in this process and across processes: concurrent
        # judges wait and reuse it.
        with _PROBE_LOCKS_GUARD:
            lock = _PROBE_LOCKS.setdefault(key, threading.Lock())
        with lock, self._probes.lock(key):
            probe = self._probes.get(key)
            if probe is not None:
                return probe
            with tempfile.TemporaryDirectory(
                prefix=_scratch_prefix("probe"), dir=_scratch_dir()
            ) as tmp:
                request = {"seed": 12345, "init_seed": 54321}
                # The probe is the reference's cost, not the candidate's: never less than
                # the default limit, however short the candidate's limit is set.
                timeout_s = max(self.config.run_timeout_s, PROBE_TIMEOUT_S)
                res = self._run_or_alone("probe", Path(tmp), request, timeout_s, task)
            if run is not None:
                run.update(duration_s=res["duration_s"], result=res.get("result") or {})
            if not res["ok"]:
                raise WorkerError(f"probing task {task.task_id!r} failed: {res['error']}")
            probe = res["result"]
            self._probes.put(key, probe)
        return probe

    def task_baselines(self, task: Task, run: dict | None = None) -> dict:
        """The task's baseline timings, cached: {name: TimingStats dict, or {"error": text}}.

        Timed once per task and GPU model, by a driver of their own (no candidate), while
        concurrent judgements of the same task, in this process or others, wait and reuse them.
        A baseline that failed is not retried by this process. run: receives the driver's run
        when the baselines were timed now.
        """
        if task.device == "any":
            task = task.for_device(self.config.device)
        cfg = self.config
        key = baseline_key(task.content_hash, self.info, cfg)
        cached = self._baselines.get(key) or {}
        if has_baselines(cached, cfg.baselines) or key in _BASELINE_FAILURES:
            return cached or _BASELINE_FAILURES[key]
        with _PROBE_LOCKS_GUARD:
            lock = _PROBE_LOCKS.setdefault(f"baselines-{key}", threading.Lock())
        with lock, self._baselines.lock(key):
            cached = self._baselines.get(key) or {}
            if has_baselines(cached, cfg.baselines) or key in _BASELINE_FAILURES:
                return cached or _BASELINE_FAILURES[key]
            wanted = [b for b in cfg.baselines if "median_ms" not in (cached.get(b) or {})]
            baselines = dict(cached)
            baselines.update(self._time_baselines(task, wanted, run))
            if has_baselines(baselines, cfg.baselines):
                self._baselines.put(key, baselines)
            else:
                _BASELINE_FAILURES[key] = baselines
            return baselines

    def _time_baselines(self, task: Task, wanted: list[str], run: dict | None) -> dict:
        """Time `wanted` baselines in a driver of their own; {name: timing or error}."""
        cfg = self.config
        timeout_s = cfg.run_timeout_s * 2 + len(wanted) * (
            cfg.run_timeout_s + cfg.compile_baseline_timeout_s
        )
        request = _baseline_request(cfg, wanted)
        if cfg.device == "cuda":
            request["device_bytes"] = device_bytes_estimate(self.probe_task(task))
        with tempfile.TemporaryDirectory(
            prefix=_scratch_prefix("judge"), dir=_scratch_dir()
        ) as tmp:
            res = self._run_or_alone("candidate", Path(tmp), request, timeout_s, task)
        if run is not None:
            run.update(duration_s=res["duration_s"], result=res.get("result") or {})
        if not res["ok"]:
            error = f"timing the baselines of {task.task_id!r} failed: {res['error']}"[:2000]
            return dict.fromkeys(wanted, {"error": error})
        result = decode(CandidateResult, res["result"])
        return {
            name: dataclasses.asdict(b.timing) if b.timing is not None else {"error": b.error}
            for name, b in result.baselines.items()
        }

    # -- steps ------------------------------------------------------------------------------

    def _judge(
        self,
        task: Task,
        snap: Path,
        tmp: Path,
        verdict: Verdict,
        *,
        timing: bool,
        profile: bool,
        reference_as_candidate: bool = False,
        device_slot: DeviceSlot | None = None,
    ) -> None:
        """Builds under a build slot, then the device phase under `device_slot`; fills `verdict`.

        The device phase is the probe, the trusted driver and the baselines.
        """
        with build_slot() as waited:
            verdict.stage_times_s["wait.build"] = waited
            built = self._build_all(snap, tmp, verdict, reference_as_candidate, task)
        if built is None:
            return
        with device_slot() if device_slot is not None else nullcontext(0.0) as waited:
            verdict.stage_times_s["wait.slot"] = waited
            self._judge_on_device(
                task,
                snap,
                tmp,
                verdict,
                *built,
                timing=timing,
                profile=profile,
                reference_as_candidate=reference_as_candidate,
            )

    def _build_all(
        self, snap: Path, tmp: Path, verdict: Verdict, reference_as_candidate: bool, task: Task
    ) -> tuple[str, BuildResult, InlineBuild] | None:
        """Static checks, kernels/ and the extensions model_new.py builds; None on failure."""
        prepared = self._static_and_build(snap, verdict, reference_as_candidate, task)
        if prepared is None:
            return None
        source, build = prepared
        inline = InlineBuild()
        if not reference_as_candidate and builds_extensions(source):
            verdict.stage = "build"
            work = tmp / f"inline-{secrets.token_hex(8)}"
            inline = build_inline(snap, source, self.config, self.info.arch, work)
            verdict.stage_times_s["build.inline"] = inline.duration_s
            if inline.error is not None:
                verdict.compiled = False
                verdict.error = "Build failed (the torch extensions model_new.py builds):\n"
                verdict.error += inline.error
                return None
        return source, build, inline

    def _judge_on_device(
        self,
        task: Task,
        snap: Path,
        tmp: Path,
        verdict: Verdict,
        source: str,
        build: BuildResult,
        inline: InlineBuild,
        *,
        timing: bool,
        profile: bool,
        reference_as_candidate: bool,
    ) -> None:
        """Probe, the trusted driver and the baselines, for a built solution."""
        cfg = self.config
        # The build stage could not import model_new.py: the runner compiles what is missing.
        compile_in_runner = builds_extensions(source) and not inline.complete
        if compile_in_runner and not reference_as_candidate:
            verdict.flags["extensions_compiled_at_load"] = True
        probe, distributions = self._probe_for(task, verdict)
        seeds = [secrets.randbits(62) for _ in range(cfg.correctness_trials)]
        runner_timeout_s = cfg.run_timeout_s + (cfg.build_timeout_s if compile_in_runner else 0)
        # The task's baselines (once per task, shared) are timed beside the candidate's run.
        baselines_job = _Background(self.task_baselines, task) if timing else None
        request = {
            "solution_dir": str(snap),
            "module_dir": build.module_dir,
            "seeds": seeds,
            "init_seed": secrets.randbits(62),
            "distributions": distributions,
            "tolerance_mode": cfg.tolerance_mode,
            "fp64_ok": bool(probe["fp64_ok"]),
            "strict_units": probe.get("strict_units"),
            "data_movement": bool(probe.get("data_movement")),
            "allow_vendor_libraries": cfg.allow_vendor_libraries
            or bool(task.judge_options.get("allow_vendor_libraries")),
            "timing": timing,
            "profile": profile,
            "reference_as_candidate": reference_as_candidate,
            "warmup_runs": cfg.warmup_runs,
            "timed_runs": cfg.timed_runs,
            "baselines": [],
            "runner_timeout_s": runner_timeout_s,
            "baseline_timeout_s": cfg.run_timeout_s,
            "sandbox": cfg.sandboxed,
            "sandbox_data_bytes": _sandbox_data_bytes(cfg),
            "extensions_dir": inline.extensions_dir,
            "compile_extensions": compile_in_runner,
            "load_timeout_s": cfg.load_timeout_s,
            "census_s": cfg.cpu_census_s,
            "call_time_factor": cfg.call_time_factor,
            "call_time_floor_s": cfg.call_time_floor_s,
            "retime_baselines": list(cfg.resolved_retime_baselines) if timing else [],
            "first_call_extra_s": (
                cfg.first_call_jit_s
                if compiles_at_first_call(source)
                else first_call_extra_s(cfg.device)
            ),
        }
        if compile_in_runner or cfg.device == "cuda":
            # The runner's own builds (and, on a GPU, Triton's launchers) count as the
            # solution's code unless they copy a library of the machine's.
            request["library_index"] = str(library_copies.index_file(cfg.resolved_cache_dir))
        if not reference_as_candidate:
            # Native code of the solution's can start threads outside forward's fallback ban,
            # and any solution's code could make an allowed op run more than itself: the
            # library judges both (thread_ban.cpp).
            try:
                request["thread_ban"] = str(thread_ban.library(cfg.resolved_cache_dir))
            except thread_ban.ThreadBanUnavailable as exc:
                logger.warning("the fallback ban stays on forward's thread: %s", exc)
                verdict.flags[Flag.THREAD_BAN_UNAVAILABLE] = str(exc)
        use_key = self._probe_key(task)
        if cfg.device == "cuda":
            request["device_bytes"] = device_bytes_for(probe, use_key)
            if request["device_bytes"] is not None:
                verdict.flags[Flag.DEVICE_BYTES_RESERVED] = request["device_bytes"]
        if cfg.sandboxed:
            check_support(cfg.device)  # a refused mechanism is a clear error, before any work
        # The driver's own work (reference passes, comparisons, the runners' start) gets the
        # run limit once more on top of what its runners may use; so does each baseline it
        # times again.
        timeout_s = runner_timeout_s + cfg.run_timeout_s * (1 + len(request["retime_baselines"]))
        verdict.stage = "load"
        run = self._run_worker("candidate", tmp, request, timeout_s, task=task)
        if not run["ok"] and run.get("timed_out"):
            # The driver holds the candidate's runner to its own limits: the driver itself
            # running out of time means an overloaded machine, not a verdict. Once more, with
            # twice the time.
            logger.warning("the driver of %s timed out; retrying once", task.task_id)
            verdict.flags[Flag.DRIVER_RETRIED] = run["error"][:300]
            run = self._run_worker("candidate", tmp, request, 2 * timeout_s, task=task)
        if self._ran_out_of_memory(run):
            # Other judgements may have held the device's memory: once more, alone on it.
            verdict.flags[Flag.RETRIED_ALONE_AFTER_OOM] = ["candidate"]
            with _DEVICE_USE_GUARD:  # what was measured was not enough: the estimate from now
                _DEVICE_USE_REFUSED.add(use_key)
            request["gate_alone"] = True
            run = self._run_worker("candidate", tmp, request, timeout_s, task=task)
        verdict.stage_times_s["candidate"] = run["duration_s"]
        _add_worker_stages(verdict, "candidate", run.get("result") or {})
        if not run["ok"] and is_out_of_memory(run.get("error") or ""):
            # Out of memory with the device to itself (or with no gate to wait for it): the
            # candidate's process tree took it, or the task does not fit beside it.
            verdict.stage = run["stage"]
            # Past its load the solution had built and imported: the failure is its memory's
            # (on an 80 GB card a solution holding the device made the driver's own copy of an
            # output fail), not its build's.
            verdict.compiled = run["stage"] not in _BEFORE_LOAD
            verdict.error = "Out of memory while judging: " + run["error"][:1500]
            return
        if not run["ok"]:
            raise WorkerError(f"judging on task {task.task_id!r} failed: {run['error']}")
        result = decode(CandidateResult, run["result"])
        self._apply(verdict, result, reference_as_candidate, len(seeds))
        if result.device_memory:
            verdict.flags[Flag.DEVICE_MEMORY_BY_PHASE] = result.device_memory
        if result.device_use is not None:
            verdict.flags[Flag.DEVICE_BYTES_USED] = result.device_use
            if result.timing is not None and not request.get("gate_alone"):
                # Timed: its runner ran the solution to the end, with its memory cached.
                with _DEVICE_USE_GUARD:
                    _DEVICE_USE[use_key] = max(_DEVICE_USE.get(use_key, 0), result.device_use)
        baselines = {}
        # Only a correct, timed candidate needs them: otherwise they go on (and into the cache)
        # without this verdict waiting.
        if baselines_job is not None and verdict.correct and result.timing is not None:
            baselines_run: dict = {}
            baselines = baselines_job.result(baselines_run)
            if baselines_run:  # timed for this judgement (not cached)
                verdict.stage_times_s["baselines"] = baselines_run["duration_s"]
                _add_worker_stages(verdict, "baselines", baselines_run["result"])
            for name, entry in baselines.items():
                if "error" in entry:
                    # A baseline that could not be timed earns no milestone against it: say why.
                    verdict.flags.setdefault(Flag.BASELINE_ERRORS, {})[name] = entry["error"][:1500]
        if timing and verdict.correct and result.timing is not None:
            again = {n: b.timing for n, b in result.baselines.items() if b.timing is not None}
            for name, entry in result.baselines.items():
                if entry.error is not None:  # the cached time stands; say why it was not renewed
                    errors = verdict.flags.setdefault(Flag.BASELINE_ERRORS, {})
                    errors[name] = f"timing it again failed: {entry.error}"[:1500]
            if again:  # timed with the candidate: the same machine, in the same minute
                verdict.flags[Flag.BASELINES_RETIMED] = {
                    n: {"cached_ms": baselines.get(n, {}).get("median_ms"), "now_ms": t.median_ms}
                    for n, t in again.items()
                }
                baselines = {**baselines, **{n: dataclasses.asdict(t) for n, t in again.items()}}
            self._set_speedups(verdict, result.timing, baselines)
            apply_speed_of_light(verdict, probe.get("roofline"))

    def _static_and_build(
        self, snap: Path, verdict: Verdict, reference_as_candidate: bool, task: Task
    ) -> tuple[str, BuildResult] | None:
        """The static checks and the build: (model_new.py's source, the build), or None."""
        solution = snap / SOLUTION_FILE
        verdict.stage = "static"
        if not solution.is_file():
            verdict.error = f"{SOLUTION_FILE} is missing: write a class ModelNew in it."
            return None
        source = solution.read_text(errors="replace")
        try:
            compile(source, SOLUTION_FILE, "exec")
        except SyntaxError as exc:
            verdict.error = f"{SOLUTION_FILE} has a syntax error: {exc.msg} (line {exc.lineno})"
            return None
        # The reference judged as its own candidate is not checked: it is not agent code.
        found = (
            []
            if reference_as_candidate
            else static_violations(
                source, snap / KERNELS_DIR, self.config.code_rules, reference_state(task.source)
            )
        )
        verdict.checks["static"] = None if reference_as_candidate else not found
        if found:
            verdict.violations += found
            verdict.error = "Static checks failed:\n" + "\n".join(found)
            return None
        verdict.stage = "build"
        build = build_kernels(snap / KERNELS_DIR, self.config, self.info.arch)
        verdict.build = build
        verdict.stage_times_s["build"] = build.duration_s
        if not build.ok:
            verdict.error = "Build failed:\n" + build.errors
            return None
        return source, build

    def _probe_for(self, task: Task, verdict: Verdict) -> tuple[dict, list[str]]:
        """The task's probe (cached), its flags on the verdict, and the trials' distributions."""
        cfg = self.config
        probe_run: dict = {}
        probe = self.probe_task(task, probe_run)
        if probe_run:  # probed for this judgement (not cached): its time and memory
            verdict.stage_times_s["probe"] = probe_run["duration_s"]
            _add_worker_stages(verdict, "probe", probe_run["result"])
        if probe["degenerate"].get(cfg.tolerance_mode):
            verdict.flags[Flag.DEGENERATE_TASK] = probe["degenerate"][cfg.tolerance_mode]
        if probe.get("fp64_disagrees") and cfg.tolerance_mode == "strict":
            # Strict mode's float64 reference computes something else for this task (e.g. a
            # dtype-dependent random draw): float32 outputs are held to kernelbench's 1e-4.
            verdict.flags[Flag.FP64_DISAGREES] = True
        usable = set(probe["distributions"])
        # Each transform touches only the inputs whose invariants it keeps (judge/contract.py).
        masks = (probe.get("input_contract") or {}).get("masks")
        distributions = [
            trial_distribution(d, masks) if d in usable else "as_is"
            for d in (DISTRIBUTIONS[k % len(DISTRIBUTIONS)] for k in range(cfg.correctness_trials))
        ]
        return probe, distributions

    @staticmethod
    def _apply(
        verdict: Verdict, result: CandidateResult, reference_as_candidate: bool, trials: int
    ) -> None:
        """Fill the verdict from what the trusted driver decided."""
        checks = verdict.checks
        verdict.stage = result.stage
        verdict.violations += result.violations
        checks["fallback_ban"] = (
            None
            if reference_as_candidate
            else not verdict.has_violation(ViolationKind.TORCH_FALLBACK)
        )
        checks["outputs_plain"] = not verdict.has_violation(
            ViolationKind.OUTPUT_ALIAS, ViolationKind.OUTPUT_TYPE
        )
        checks["inputs_unmutated"] = not verdict.has_violation(ViolationKind.INPUT_MUTATED)
        if result.numerics:
            verdict.flags[Flag.NUMERICS] = result.numerics
        if result.candidate_error is not None:
            verdict.compiled = not result.build_failed
            if result.build_failed:
                verdict.stage = "build"
            verdict.error = result.candidate_error
            return
        verdict.compiled = True
        cmp = result.comparison
        if cmp is None:  # the driver stopped before comparing: only violations can say why
            verdict.error = "Rule violations:\n" + "\n".join(verdict.violations)
            return
        verdict.trials = trials
        verdict.correct = cmp.correct
        checks["correct"] = cmp.correct
        verdict.max_abs_error = cmp.max_abs_error
        verdict.max_rel_error = cmp.max_rel_error
        verdict.details = list(cmp.details)
        checks["deterministic"] = result.deterministic
        if not result.deterministic and not verdict.correct:
            verdict.flags[Flag.NONDETERMINISTIC] = True
        elif not result.deterministic:
            verdict.violations.append(
                format_violation(
                    ViolationKind.NONDETERMINISTIC,
                    "two runs on the same input differ beyond the tolerance "
                    "(a race or a read of uninitialised memory)",
                )
            )
        elif not result.bitwise_deterministic:
            verdict.flags[Flag.BITWISE_NONDETERMINISTIC] = True
        recheck = result.timing_recheck
        checks["timing_recheck"] = None if recheck is None else recheck.correct
        if recheck is not None and not recheck.correct:
            verdict.violations.append(
                format_violation(
                    ViolationKind.TIMING_RECHECK,
                    "outputs produced inside the timing loop are wrong",
                )
            )
        if result.weights_not_copied:
            verdict.details.append(
                "reference weights with no same-named, same-shaped ModelNew parameter: "
                + ", ".join(result.weights_not_copied[:8])
            )
        verdict.profile_table = result.profile_table
        if result.kernels is not None:
            verdict.flags[Flag.KERNELS] = dataclasses.asdict(result.kernels)
            verdict.flags[Flag.PROFILE_KERNEL_MS_PER_CALL] = result.kernels.kernel_ms_per_call
        if result.gpu_state:
            verdict.flags[Flag.GPU_STATE] = result.gpu_state
        if result.cpu_time:
            verdict.flags[Flag.CPU_TIME] = result.cpu_time
        # The reference judged as the candidate runs PyTorch kernels by design.
        own_kernels = None if reference_as_candidate else result.kernels
        _check_timing_integrity(verdict, result.timing, own_kernels)
        if not verdict.correct:
            verdict.error = "Incorrect output: " + "; ".join(verdict.details[:3])
        elif verdict.violations:
            verdict.error = "Rule violations:\n" + "\n".join(verdict.violations)
        else:
            verdict.stage = "done"

    def _run_or_alone(
        self, role: str, tmp: Path, request: dict, timeout_s: float, task: Task
    ) -> dict:
        """`_run_worker`; once more alone on the device if it ran out of memory beside others."""
        res = self._run_worker(role, tmp, request, timeout_s, task=task)
        if self._ran_out_of_memory(res):
            request["gate_alone"] = True
            res = self._run_worker(role, tmp, request, timeout_s, task=task)
        return res

    def _ran_out_of_memory(self, run: dict) -> bool:
        """Whether a worker run (not already alone) failed by running out of memory.

        Other judgements may have shared the device then, so it is worth one run alone.
        """
        if not self.config.device_gate or run.get("alone"):
            return False
        if not run["ok"]:
            return is_out_of_memory(run.get("error") or "")
        # The candidate's process said it ran out: its word is not enough (a rerun alone
        # reserves the whole device), only the driver's finding that others held the memory.
        return (run.get("result") or {}).get("memory_short") is True

    @staticmethod
    def _set_speedups(verdict: Verdict, timing: TimingStats, baselines: dict) -> None:
        # The baselines' drivers time their calls' finish (from the runner's "done" to its
        # reply: output checks, the outputs copied into the driver's slots) with no candidate
        # process alive (cuda_gym.judge.driver._time). A candidate whose finish takes longer did
        # work after saying "done" (or hands over slowly): the difference counts in its time.
        # Medians and fastest calls are both compared, the larger difference charged: a
        # baseline timed on a busy host has a slow median finish (room to hide work in) but
        # not a slow fastest one, and a candidate hiding work in only some calls has a fast
        # fastest finish but not a fast median one.
        entries = [baselines.get(n) or {} for n in ("eager", "compile", *baselines)]
        base = next((e for e in entries if e.get("finish_ms")), None)
        if base is not None:
            excess = max(0.0, timing.finish_ms - base["finish_ms"])
            if base.get("finish_min_ms") and timing.finish_min_ms:
                excess = max(excess, timing.finish_min_ms - base["finish_min_ms"])
            verdict.flags[Flag.FINISH_EXCESS_MS] = round(excess, 4)
            timing = dataclasses.replace(
                timing,
                median_ms=timing.median_ms + excess,
                mean_ms=timing.mean_ms + excess,
                min_ms=timing.min_ms + excess,
                max_ms=timing.max_ms + excess,
            )
        cand_ms = timing.median_ms
        verdict.time_ms = {
            "candidate": cand_ms,
            "eager": baselines.get("eager", {}).get("median_ms"),
            "compile": baselines.get("compile", {}).get("median_ms"),
        }
        verdict.flags[Flag.CANDIDATE_HOST_MEDIAN_MS] = timing.host_median_ms
        # The driver's full statistics: spread, round trip, warm-up calls, re-checked calls.
        verdict.flags[Flag.CANDIDATE_TIMING] = dataclasses.asdict(timing)
        if cand_ms <= 0:
            return
        verdict.flags[Flag.TIMING_NOISE] = {
            name: round(_timing_noise(timing.spread, timing.runs, entry), 4)
            for name, entry in baselines.items()
            if entry.get("median_ms")
        }
        if verdict.time_ms["eager"]:
            verdict.speedup_vs_eager = verdict.time_ms["eager"] / cand_ms
        if verdict.time_ms["compile"]:
            verdict.speedup_vs_compile = verdict.time_ms["compile"] / cand_ms

    def _run_worker(
        self, role: str, tmp: Path, request: dict, timeout_s: float, task: Task | None = None
    ) -> dict:
        """Run a worker child; return {"ok", "error", "stage", "result", "duration_s"}.

        Each run gets a fresh directory with a random name, created just before the child
        starts, holding its own copy of the task: a candidate that ran earlier cannot have
        planted or rewritten anything the next child reads.
        """
        work = tmp / f"{role}-{secrets.token_hex(8)}"
        work.mkdir()
        result_path = work / "result.json"
        task_path = work / "reference_task.py"
        if task is not None:
            task_path.write_text(task.source)
        header = {
            "result_path": str(result_path),
            "task_path": str(task_path),
            "device": self.config.device,
            "device_gate": self.config.device_gate,
            "gate_alone": bool(request.get("gate_alone")),
            "device_bytes": request.get("device_bytes"),
            "memory_per_step": self.config.memory_per_step,
            "memory_share": self.config.memory_share,
        }
        request = {k: v for k, v in request.items() if k not in ("gate_alone", "device_bytes")}
        request["header"] = header
        base_env = python_child_env()
        if self.config.forks_workers and role == "candidate":
            # Runners forked from a process that imported torch (cuda_gym.runtime.fork_server).
            server = shared_fork_server(
                runner_env_for(base_env), runner_python_flags(), self.config.device
            )
            header["fork_server"] = server.address()
        # torch.compile's cache (reference baselines) lives with ours, not in TMPDIR.
        base_env.setdefault(
            "TORCHINDUCTOR_CACHE_DIR", str(self.config.resolved_cache_dir / "inductor")
        )
        env = dict(base_env)
        env.setdefault("TORCH_EXTENSIONS_DIR", str(self.config.resolved_cache_dir / "inline"))
        gpu = current_gpu()
        if gpu is not None and self.config.device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = gpu  # the GPU of the judge slot this call holds
        stage_file = result_path.with_suffix(".stage")
        # The clock stops while the worker waits for its device's gate (another process times).
        pause = Pause(
            lambda: _read_stage(stage_file) in WAITING_STAGES, self.config.gate_wait_max_s
        )
        stdin_data = json.dumps(request).encode()
        slow = [sys.executable, "-m", "cuda_gym.judge.worker", role]
        if self.config.forks_workers:
            launcher = shared_launcher(base_env, WORKER_PRELOAD)
            proc = launcher.run(
                "cuda_gym.judge.worker",
                [role],
                timeout_s=timeout_s,
                cwd=work,
                env=env,
                stdin_data=stdin_data,
                pause=pause,
            )
            if not proc.ok and not result_path.exists() and _read_stage(stage_file) is None:
                # The forked worker failed in stage "start", before any task or candidate code
                # ran (e.g. its CUDA could not start after fork): the zygote is at fault, not the
                # judged code. Once more the slow way, and no more forking in this process.
                launcher.disable(
                    f"a forked {role} worker {proc.describe_failure(timeout_s)} at start:\n"
                    + (proc.stderr or proc.stdout).strip()[-1500:]
                )
                proc = run_process(
                    slow,
                    timeout_s=timeout_s,
                    cwd=work,
                    env=env,
                    stdin_data=stdin_data,
                    pause=pause,
                )
        else:
            proc = run_process(
                slow,
                timeout_s=timeout_s,
                cwd=work,
                env=env,
                stdin_data=stdin_data,
                pause=pause,
            )
        stage = _read_stage(stage_file) or "start"
        result = _read_result(result_path)
        alone = bool(header["gate_alone"])
        if result is not None and result.get("ok") and proc.ok:
            return {
                "ok": True,
                "stage": stage,
                "result": result,
                "duration_s": proc.duration_s,
                "alone": alone,
            }
        if result is not None and not result.get("ok"):
            error = result.get("error") or "failed"
        else:
            error = f"The {role} process {proc.describe_failure(timeout_s)} during stage '{stage}'."
            tail = (proc.stderr or proc.stdout).strip()[-1500:]
            if tail:
                error += "\n" + tail
        return {
            "ok": False,
            "stage": stage,
            "result": result or {},
            "error": error,
            "duration_s": proc.duration_s,
            "timed_out": proc.timed_out,
            "alone": alone,
        }


_BACKGROUND: set[threading.Thread] = set()
_BACKGROUND_LOCK = threading.Lock()


def wait_for_background_work(timeout_s: float | None = None) -> bool:
    """Wait for this process's background judge work; whether all of it ended in time.

    That work: task baselines still being timed after the verdict that started them returned.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        with _BACKGROUND_LOCK:
            running = list(_BACKGROUND)
        if not running:
            return True
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        running[0].join(left)


def _timing_noise(spread: float, runs: int, baseline: dict) -> float:
    """About two standard errors of the ratio of two medians, relative.

    A median of n calls whose p10-p90 width is w (relative) has a standard error of about
    0.49 w / sqrt(n) (for a normal spread); two of them, about sqrt(w1^2/n1 + w2^2/n2) / 2.
    """
    other_spread = baseline.get("spread") or 0.0
    other_runs = baseline.get("runs") or 1
    return math.sqrt(spread**2 / max(runs, 1) + other_spread**2 / max(other_runs, 1))


class _Background:
    """`fn(*args, run=...)` on a thread of its own, started now; `result(run)` waits for it.

    The thread runs in a copy of the caller's context, so it keeps the caller's GPU slot.
    """

    def __init__(self, fn, *args) -> None:
        self._run: dict = {}
        self._value = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._target, fn, args), daemon=True
        )
        with _BACKGROUND_LOCK:
            _BACKGROUND.add(self._thread)
        self._thread.start()

    def _target(self, fn, args) -> None:
        try:
            self._value = fn(*args, run=self._run)
        except BaseException as exc:  # handed to the caller in result()
            self._error = exc
        finally:
            with _BACKGROUND_LOCK:
                _BACKGROUND.discard(threading.current_thread())

    def result(self, run: dict | None = None):
        """Wait for the value (raise what the function raised); `run` gets its run record."""
        self._thread.join()
        if run is not None:
            run.update(self._run)
        if self._error is not None:
            raise self._error
        return self._value


_UNSANDBOXED_WARNED = threading.Event()


def _warn_unsandboxed() -> None:
    if not _UNSANDBOXED_WARNED.is_set():
        _UNSANDBOXED_WARNED.set()
        logger.warning(
            "judging WITHOUT the OS sandbox (JudgeConfig.sandbox=False or "
            "CUDA_GYM_UNSANDBOXED=1): candidate code can reach this machine's files and "
            "processes; for development only (every verdict has flags['unsandboxed'])"
        )


def _sandbox_data_bytes(config: JudgeConfig) -> int:
    """A sandboxed runner's RLIMIT_DATA: sandbox_memory_gib, else the machine's memory."""
    if config.sandbox_memory_gib:
        return int(config.sandbox_memory_gib * GiB)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# A judgement's device memory from its task probe's peak: the driver holds the reference's
# outputs, inputs and float64 copies (up to about twice the probe's peak, measured on KernelBench
# and the exploit suite's large tasks), the runner its model and outputs, each a CUDA context.
MEMORY_PER_PROBE_PEAK = 2.2
MEMORY_OVERHEAD_BYTES = 3 << 29  # 1.5 GiB


def device_bytes_estimate(probe: dict) -> int | None:
    """Device memory to reserve for a judgement (None where the probe measured no peak)."""
    peak = _device_peak(probe.get("device_peak"))
    if peak is None:
        return None
    return int(MEMORY_PER_PROBE_PEAK * peak["reserved"]) + MEMORY_OVERHEAD_BYTES


# A candidate worker's stages up to and including the solution's import (worker stage names).
_BEFORE_LOAD = frozenset({"setup", "start", "runner", "memory", "gate", "load"})


# A reservation from measured use (device_bytes_for): what the task's judgements held at most,
# plus a quarter (sampled peaks miss short allocations; solutions differ) and a fixed margin.
USE_HEADROOM = 1.25
USE_MARGIN_BYTES = 1 << 30


def device_bytes_for(probe: dict, key: str) -> int | None:
    """Device memory to reserve for a judgement of the task whose probe is `probe` (key `key`).

    The estimate from the probe (device_bytes_estimate) until a judgement of the task has been
    measured; then the measured peak with headroom, never above the estimate.
    """
    estimate = device_bytes_estimate(probe)
    with _DEVICE_USE_GUARD:
        used = None if key in _DEVICE_USE_REFUSED else _DEVICE_USE.get(key)
    if estimate is None or used is None:
        return estimate
    return min(estimate, int(USE_HEADROOM * used) + USE_MARGIN_BYTES)


def _baseline_request(config: JudgeConfig, wanted: list[str]) -> dict:
    """A driver request that times the task's `wanted` baselines and judges no candidate."""
    return {
        "solution_dir": "",
        "module_dir": None,
        "seeds": [],
        "init_seed": secrets.randbits(62),
        "distributions": [],
        "tolerance_mode": config.tolerance_mode,
        "fp64_ok": False,
        "strict_units": None,
        "allow_vendor_libraries": False,
        "timing": True,
        "profile": False,
        "reference_as_candidate": True,
        "warmup_runs": config.warmup_runs,
        "timed_runs": config.timed_runs,
        "baselines": wanted,
        "runner_timeout_s": config.run_timeout_s,
        "baseline_timeout_s": config.run_timeout_s + config.compile_baseline_timeout_s,
        "sandbox": config.sandboxed,
        "sandbox_data_bytes": _sandbox_data_bytes(config),
        "baselines_only": True,
    }


def _read_regular(path: Path, max_bytes: int) -> str | None:
    """The text of `path` if it is a regular file of at most `max_bytes`, else None.

    Never follows a symlink and never blocks on a FIFO: a worker that ran candidate code
    may have left either.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return None
        return os.read(fd, max_bytes + 1).decode(errors="replace")
    finally:
        os.close(fd)


def _read_stage(path: Path) -> str | None:
    """The stage a worker last reported, or None (not started, or unreadable)."""
    return _read_regular(path, 256)


def _read_result(path: Path) -> dict | None:
    """A worker's result.json, or None (missing, not a regular file, malformed)."""
    text = _read_regular(path, MAX_RESULT_BYTES)
    if text is None:
        return None
    try:
        result = json.loads(text)
    except ValueError:
        return None
    return result if isinstance(result, dict) else None


def _add_worker_stages(verdict: Verdict, role: str, result: dict) -> None:
    for stage, seconds in (result.get("stage_s") or {}).items():
        verdict.stage_times_s[f"{role}.{stage}"] = seconds
    peak = _device_peak(result.get("device_peak"))
    if peak:
        verdict.flags.setdefault(Flag.DEVICE_PEAK_BYTES, {})[role] = peak
    cpu = result.get("cpu_s")
    if type(cpu) in (int, float) and 0 <= cpu < 1e7:
        verdict.flags.setdefault(Flag.WORKER_CPU_S, {})[role] = round(float(cpu), 3)
    for stage, seconds in (result.get("stage_cpu_s") or {}).items():
        if type(seconds) in (int, float) and 0 <= seconds < 1e7:
            verdict.flags.setdefault(Flag.WORKER_CPU_S, {})[f"{role}.{stage}"] = seconds
    forked = result.get("runners_forked")
    if type(forked) is int and forked > 0:
        verdict.flags.setdefault(Flag.RUNNERS_FORKED, {})[role] = forked


def _device_peak(report) -> dict | None:
    """A worker's peak GPU memory (allocated and reserved bytes); None unless both are whole.

    For diagnosis, and for checking the KernelBench harness's memory estimates.
    """
    return _whole_numbers(report, ("allocated", "reserved"))


def _check_timing_integrity(
    verdict: Verdict, timing: TimingStats | None, kernels: KernelSummary | None
) -> None:
    """Flags and violations read from the timing and the (untrusted) profile.

    - side_work (flag): the driver's L2 flush before calls ran slower than alone: other work
      was on the GPU then.
    - foreign_kernels: kernels from PyTorch (or a vendor library the task does not allow)
      account for most of the profiled GPU time: the candidate's own kernels must. The profile
      comes from the candidate's process: it can only reject.
    - profile_mismatch (flag): the profiled kernel time is far from the measured time.
    """
    checks = verdict.checks
    if timing is not None and timing.side_work:
        verdict.flags[Flag.SIDE_WORK] = {
            "flush_ms": timing.flush_ms,
            "flush_excess_ms": timing.flush_excess_ms,
        }
    if kernels is not None and timing is not None and timing.median_ms > 0:
        ratio = kernels.kernel_ms_per_call / timing.median_ms
        if ratio > PROFILE_MISMATCH_FACTOR:
            verdict.flags[Flag.PROFILE_MISMATCH] = {
                "profile_kernel_ms": kernels.kernel_ms_per_call,
                "measured_ms": timing.median_ms,
            }
    if kernels is not None and kernels.own_share is not None:
        checks["own_kernels"] = kernels.own_share >= MIN_OWN_KERNEL_SHARE
        if not checks["own_kernels"]:
            share = 100 * kernels.own_share
            verdict.violations.append(
                format_violation(
                    ViolationKind.FOREIGN_KERNELS,
                    f"the candidate's own kernels took {share:.0f}%"
                    f" of the GPU time (at least {100 * MIN_OWN_KERNEL_SHARE:.0f}% required); "
                    "top foreign kernels: " + "; ".join(kernels.foreign[:3]),
                )
            )
    if verdict.violations and verdict.correct:
        verdict.error = "Rule violations:\n" + "\n".join(verdict.violations)


def _whole_numbers(report, keys: tuple[str, ...]) -> dict | None:
    """`keys` of a worker's report when every one is a whole number >= 0, else None.

    A worker's figures may come from the candidate's process: anything else is dropped.
    """
    if not isinstance(report, dict):
        return None
    if not all(type(report.get(k)) is int and report[k] >= 0 for k in keys):
        return None
    return {k: report[k] for k in keys}


def apply_speed_of_light(verdict: Verdict, roofline: dict | None) -> None:
    """Flag a candidate timed below the task's speed-of-light bound; it earns no speedup."""
    cand_ms = verdict.time_ms.get("candidate")
    sol_ms = (roofline or {}).get("sol_ms")
    if not cand_ms or not sol_ms:
        return
    if cand_ms < SOL_SLACK * sol_ms:
        verdict.flags[Flag.SPEED_OF_LIGHT] = {"candidate_ms": cand_ms, "bound_ms": sol_ms}
        verdict.details.append(
            f"timed at {cand_ms:.4f} ms, below the task's speed-of-light bound of {sol_ms:.4f} ms: "
            "no speedup reward"
        )
        verdict.speedup_vs_eager = None
        verdict.speedup_vs_compile = None


def static_violations(
    source: str,
    kernels_dir: Path | None = None,
    rules: str = "env",
    state_names: frozenset[str] = frozenset(),
) -> list[str]:
    """Static findings on model_new.py and the C++/CUDA sources, as "static:<rule>: ..." strings.

    rules: the Python rule set, "env" or "external" (static_checks.RULE_SETS).
    state_names: attributes forward may store on self (static_checks.reference_state).
    """
    found = check_solution_source(source, rules=rules, state_names=state_names)
    native = {f"model_new.py string {i}": s for i, s in enumerate(string_constants(source))}
    if kernels_dir is not None:
        native.update(_kernel_sources(kernels_dir))
    if kernels_dir is not None and kernels_dir.parent.is_dir():
        # The other C/C++/CUDA files the snapshot copied (beside model_new.py, csrc/, ...),
        # which cpp_extension.load(sources=[...]) may build.
        solution_dir = kernels_dir.parent
        for path in sorted(solution_dir.rglob("*")):
            if (
                path.suffix in SOURCE_SUFFIXES
                and path.is_file()
                and not path.is_symlink()
                and kernels_dir not in path.parents
            ):
                native[str(path.relative_to(solution_dir))] = path.read_text(errors="replace")
    found += check_native_sources(native)
    return [
        format_violation(ViolationKind.STATIC, f"line {v.line}: {v.message}", rule=v.rule)
        for v in found
    ]


def _kernel_sources(kernels_dir: Path) -> dict[str, str]:
    """{"kernels/<path>": text} of every file of a snapshot's kernels/ (none are links)."""
    if not kernels_dir.is_dir():
        return {}
    return {
        f"kernels/{path.relative_to(kernels_dir)}": path.read_text(errors="replace")
        for path in sorted(kernels_dir.rglob("*"))
        if path.is_file()
    }


def kernels_violations(kernels_dir: Path) -> list[str]:
    """The static checks of kernels/'s sources alone, as "static:<rule>: ..." strings."""
    return [
        format_violation(ViolationKind.STATIC, f"line {v.line}: {v.message}", rule=v.rule)
        for v in check_native_sources(_kernel_sources(kernels_dir))
    ]


_SWEPT = threading.Event()


def _scratch_prefix(kind: str) -> str:
    """The scratch directory prefix `cuda_gym_<kind>_<pid>_`.

    Directories a killed judge process left behind are recognised by their dead pid and
    removed by the next process that judges.
    """
    if not _SWEPT.is_set():
        _SWEPT.set()
        base = Path(_scratch_dir() or tempfile.gettempdir())
        for name in ("judge", "probe"):
            remove_stale(base, f"cuda_gym_{name}_")
    return f"cuda_gym_{kind}_{os.getpid()}_"


def _scratch_dir() -> str | None:
    """Memory-backed /dev/shm for the judge's scratch files (outputs can be GiBs), if usable."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


# C/C++/CUDA sources beside model_new.py or in folders under it (csrc/, src/, ...), which it
# may build with cpp_extension.load(sources=[...]) or read into load_inline: copied with it
# (each up to SOURCE_BYTES; folders up to SOURCE_DEPTH deep, hidden ones and caches skipped).
SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c", ".cu", ".cuh", ".h", ".hpp", ".hh", ".inc")
SOURCE_BYTES = 1 << 20
SOURCES_TOTAL_BYTES = 16 << 20  # all of them together
SOURCE_DEPTH = 3
SOURCE_ENTRIES = 4096  # directory entries looked at, at most
KERNELS_TOTAL_BYTES = 64 << 20  # kernels/ as a whole
MAX_NOT_COPIED = 20  # files the snapshot left out, listed in a verdict


def copy_sources(solution_dir: Path, dest: Path, skipped: list[str] | None = None) -> None:
    """Copy the C/C++/CUDA sources under `solution_dir` (but kernels/) to `dest`, same layout.

    Regular files only (`copy_regular`), within SOURCE_BYTES each and SOURCES_TOTAL_BYTES
    together; what was not copied for being something else goes to `skipped`.
    """
    if not solution_dir.is_dir():
        return
    left, seen = SOURCES_TOTAL_BYTES, 0
    for root, dirs, names in os.walk(solution_dir, followlinks=False):
        rel = Path(root).relative_to(solution_dir)
        seen += len(dirs) + len(names)
        if seen > SOURCE_ENTRIES:
            break
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d not in ("__pycache__", KERNELS_DIR if rel == Path(".") else "")
            and len(rel.parts) < SOURCE_DEPTH
        )
        for name in sorted(names):
            if Path(name).suffix not in SOURCE_SUFFIXES:
                continue
            (dest / rel).mkdir(parents=True, exist_ok=True)
            copied = copy_regular(Path(root, name), dest / rel / name, min(SOURCE_BYTES, left))
            if isinstance(copied, int):
                left -= copied
            elif copied != "too large" and skipped is not None:
                skipped.append(f"{rel / name}: {copied}")


def copy_regular(src: Path, dst: Path, max_bytes: int) -> int | str:
    """Copy `src` to `dst` if it is a regular file of at most `max_bytes`: its size, or why not.

    Opened without following a link and without blocking (a FIFO), checked on the descriptor
    it is read from: a link, a device, a FIFO or a file swapped for one in between is never
    read. Why not: "a symbolic link", "not a regular file", "too large", "unreadable".
    """
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return "a symbolic link" if src.is_symlink() or exc.errno == errno.ELOOP else "unreadable"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_size > max_bytes:
            return "too large"
        with open(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            return "too large"
        dst.write_bytes(data)
        return len(data)
    finally:
        os.close(fd)


def _snapshot(solution_dir: Path, dest: Path, skipped: list[str] | None = None) -> Path:
    """Copy model_new.py, kernels/ and the C/C++/CUDA sources beside them into dest.

    So later edits cannot race the judge. Regular files only (`copy_regular`): a link is never
    followed (its target could be any file the judge can read, and a compiler error would quote
    it), nor a device or FIFO read; what was left out for that goes to `skipped`, as
    "path: why".
    """
    skipped = [] if skipped is None else skipped
    dest.mkdir(parents=True, exist_ok=True)
    copied = copy_regular(solution_dir / SOLUTION_FILE, dest / SOLUTION_FILE, SOURCES_TOTAL_BYTES)
    if isinstance(copied, str) and (solution_dir / SOLUTION_FILE).exists():
        skipped.append(f"{SOLUTION_FILE}: {copied}")
    copy_sources(solution_dir, dest, skipped)
    kernels = solution_dir / KERNELS_DIR
    if kernels.is_symlink():
        skipped.append(f"{KERNELS_DIR}: a symbolic link")
    elif kernels.is_dir():
        _copy_kernels(kernels, dest / KERNELS_DIR, skipped)
    return dest


def _copy_kernels(kernels: Path, dest: Path, skipped: list[str]) -> None:
    """kernels/ as it is, regular files and directories only (no link followed)."""
    left, seen = KERNELS_TOTAL_BYTES, 0
    for root, dirs, names in os.walk(kernels, followlinks=False):
        rel = Path(root).relative_to(kernels)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        seen += len(dirs) + len(names)
        if seen > SOURCE_ENTRIES:
            skipped.append(f"{KERNELS_DIR}: more than {SOURCE_ENTRIES} entries")
            break
        for name in [d for d in dirs if Path(root, d).is_symlink()]:
            skipped.append(f"{KERNELS_DIR}/{rel / name}: a symbolic link")
        dirs[:] = sorted(d for d in dirs if not Path(root, d).is_symlink())
        for name in sorted(names):
            copied = copy_regular(Path(root, name), dest / rel / name, left)
            if isinstance(copied, int):
                left -= copied
            else:
                skipped.append(f"{KERNELS_DIR}/{rel / name}: {copied}")
