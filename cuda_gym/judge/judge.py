"""The judge: build, check correctness, time against baselines, and return a Verdict.

The candidate and the reference run in separate child processes. The candidate runs first and
receives only inputs and weights; the reference process, which never loads candidate code,
then computes the expected outputs on the same inputs and compares (on the device).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cuda_gym.errors import WorkerError
from cuda_gym.judge.baselines import BaselineCache, baseline_key
from cuda_gym.judge.build import build_kernels
from cuda_gym.judge.config import JudgeConfig
from cuda_gym.judge.device import device_info
from cuda_gym.judge.verdict import BuildResult, Verdict, milestone_reward
from cuda_gym.runtime import python_child_env, run_process
from cuda_gym.tasks import Task

logger = logging.getLogger(__name__)

SOLUTION_FILE = "model_new.py"
KERNELS_DIR = "kernels"


class Judge:
    """Judges solutions to tasks on one device.

    Args:
        config: How to judge; `config.device` selects CUDA or C++ (CPU) kernels.
    """

    def __init__(self, config: JudgeConfig | None = None) -> None:
        self.config = config or JudgeConfig()
        self.info = device_info(self.config.device)
        self._baselines = BaselineCache(self.config.resolved_cache_dir)

    # -- public API -------------------------------------------------------------------------

    def build(self, solution_dir: str | os.PathLike) -> BuildResult:
        """Build `solution_dir/kernels` (a snapshot is taken first)."""
        with tempfile.TemporaryDirectory(prefix="cuda_gym_build_") as tmp:
            snap = _snapshot(Path(solution_dir), Path(tmp))
            return build_kernels(snap / KERNELS_DIR, self.config, self.info.arch)

    def evaluate(
        self,
        task: Task,
        solution_dir: str | os.PathLike,
        *,
        timing: bool = True,
        profile: bool = False,
    ) -> Verdict:
        """Judge the solution in `solution_dir` (model_new.py + kernels/) against `task`.

        Args:
            task: The task, specialised for this judge's device (or raw; it is specialised here).
            solution_dir: Directory holding `model_new.py` and optionally `kernels/`.
            timing: Time the candidate and the baselines and compute speedups.
            profile: Also return a table of the candidate's top kernels/operators.

        Returns:
            The Verdict. Failures of the candidate are in the verdict; only infrastructure
            failures raise (WorkerError).
        """
        start = time.monotonic()
        cfg = self.config
        if task.device == "any":
            task = task.for_device(cfg.device)
        verdict = Verdict(
            mode=cfg.tolerance_mode,
            atol=cfg.atol,
            rtol=cfg.rtol,
            device=cfg.device,
            device_name=self.info.name,
        )
        with tempfile.TemporaryDirectory(prefix="cuda_gym_judge_", dir=_scratch_dir()) as tmp:
            tmp_path = Path(tmp)
            snap = _snapshot(Path(solution_dir), tmp_path / "solution")
            self._judge(task, snap, tmp_path, verdict, timing=timing, profile=profile)
        verdict.duration_s = time.monotonic() - start
        return verdict

    # -- steps ------------------------------------------------------------------------------

    def _judge(
        self, task: Task, snap: Path, tmp: Path, verdict: Verdict, *, timing: bool, profile: bool
    ) -> None:
        cfg = self.config
        solution = snap / SOLUTION_FILE
        verdict.stage = "static"
        if not solution.is_file():
            verdict.error = f"{SOLUTION_FILE} is missing: write a class ModelNew in it."
            return
        try:
            compile(solution.read_text(errors="replace"), SOLUTION_FILE, "exec")
        except SyntaxError as exc:
            verdict.error = f"{SOLUTION_FILE} has a syntax error: {exc.msg} (line {exc.lineno})"
            return

        verdict.stage = "build"
        build = build_kernels(snap / KERNELS_DIR, cfg, self.info.arch)
        verdict.build = build
        verdict.stage_times_s["build"] = build.duration_s
        if not build.ok:
            verdict.error = "Build failed:\n" + build.errors
            return

        task_path = tmp / "reference_task.py"
        task_path.write_text(task.source)
        seeds = [secrets.randbits(62) for _ in range(cfg.correctness_trials)]
        init_seed = secrets.randbits(62)

        # 1. The candidate first, in its own process: it never sees reference outputs.
        verdict.stage = "load"
        uses_inline = "load_inline" in solution.read_text(errors="replace")
        cand = self._run_worker(
            "candidate",
            tmp,
            {
                "task_path": str(task_path),
                "solution_dir": str(snap),
                "module_dir": build.module_dir,
                "device": cfg.device,
                "seeds": seeds,
                "init_seed": init_seed,
                "timing": timing,
                "profile": profile,
                "warmup_runs": cfg.warmup_runs,
                "timed_runs": cfg.timed_runs,
            },
            timeout_s=cfg.run_timeout_s + (cfg.build_timeout_s if uses_inline else 0),
        )
        verdict.stage = cand.get("stage", "load")
        verdict.stage_times_s["candidate"] = cand["duration_s"]
        if not cand["ok"]:
            build_failed = bool(cand.get("result", {}).get("build_failed"))
            verdict.compiled = not build_failed
            if build_failed:
                verdict.stage = "build"
            verdict.error = cand["error"]
            return
        verdict.compiled = True

        # 2. The reference, in a fresh process: expected outputs, the comparison (on the
        # device), and the baselines when they are not cached.
        key = baseline_key(task.content_hash, self.info, cfg)
        cached = self._baselines.get(key) if timing else None
        wanted = [b for b in cfg.baselines if timing and not (cached and b in cached)]
        ref = self._run_worker(
            "reference",
            tmp,
            {
                "task_path": str(task_path),
                "device": cfg.device,
                "seeds": seeds,
                "init_seed": init_seed,
                "candidate_outputs_path": str(cand["outputs_path"]),
                "atol": cfg.atol,
                "rtol": cfg.rtol,
                "baselines": wanted,
                "warmup_runs": cfg.warmup_runs,
                "timed_runs": cfg.timed_runs,
            },
            timeout_s=cfg.run_timeout_s
            + (cfg.compile_baseline_timeout_s if "compile" in wanted else 0),
        )
        verdict.stage_times_s["reference"] = ref["duration_s"]
        if not ref["ok"]:
            raise WorkerError(f"the reference for task {task.task_id!r} failed: {ref['error']}")
        baselines = dict(cached or {})
        if wanted:
            baselines.update(ref["result"].get("baselines", {}))
            if all("median_ms" in baselines.get(b, {}) for b in cfg.baselines):
                self._baselines.put(key, baselines)

        verdict.stage = "compare"
        cmp = ref["result"]["comparison"]
        verdict.trials = len(seeds)
        verdict.correct = bool(cmp["correct"])
        verdict.max_abs_error = cmp["max_abs_error"]
        verdict.max_rel_error = cmp["max_rel_error"]
        verdict.details = list(cmp["details"])
        missing = cand["result"].get("weights_not_copied") or []
        if missing:
            verdict.details.append(
                "reference weights with no same-named, same-shaped ModelNew parameter: "
                + ", ".join(missing[:8])
            )
        if not verdict.correct:
            verdict.error = "Incorrect output: " + "; ".join(verdict.details[:3])
        verdict.profile_table = cand["result"].get("profile_table")
        verdict.stage = "done"
        if timing:
            cand_ms = (cand["result"].get("timing") or {}).get("median_ms")
            verdict.time_ms = {
                "candidate": cand_ms,
                "eager": baselines.get("eager", {}).get("median_ms"),
                "compile": baselines.get("compile", {}).get("median_ms"),
            }
            if cand_ms and cand_ms > 0:
                for name, field_name in (
                    ("eager", "speedup_vs_eager"),
                    ("compile", "speedup_vs_compile"),
                ):
                    base = verdict.time_ms[name]
                    if base:
                        setattr(verdict, field_name, base / cand_ms)
        verdict.reward = milestone_reward(
            verdict.correct, verdict.speedup_vs_eager, verdict.speedup_vs_compile, cfg.reward_margin
        )
        verdict.verdict = "accept" if verdict.correct else "reject"

    def _run_worker(self, role: str, tmp: Path, request: dict, timeout_s: float) -> dict:
        """Run a worker child; return {"ok", "error", "stage", "result", "outputs_path"}."""
        result_path = tmp / f"{role}.json"
        outputs_path = tmp / f"{role}_outputs.pt"
        request = dict(request, result_path=str(result_path), outputs_path=str(outputs_path))
        env = python_child_env()
        env.setdefault("TORCH_EXTENSIONS_DIR", str(self.config.resolved_cache_dir / "inline"))
        proc = run_process(
            [sys.executable, "-m", "cuda_gym.judge.worker", role],
            timeout_s=timeout_s,
            cwd=tmp,
            env=env,
            stdin_data=json.dumps(request).encode(),
        )
        stage_file = result_path.with_suffix(".stage")
        stage = stage_file.read_text() if stage_file.exists() else "start"
        result = json.loads(result_path.read_text()) if result_path.exists() else None
        if result is not None and result.get("ok") and proc.ok:
            return {
                "ok": True,
                "stage": stage,
                "result": result,
                "outputs_path": outputs_path,
                "duration_s": proc.duration_s,
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
        }


def _scratch_dir() -> str | None:
    """Memory-backed /dev/shm for the judge's scratch files (outputs can be GiBs), if usable."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def _snapshot(solution_dir: Path, dest: Path) -> Path:
    """Copy model_new.py and kernels/ into dest, so later edits cannot race the judge."""
    dest.mkdir(parents=True, exist_ok=True)
    src = solution_dir / SOLUTION_FILE
    if src.is_file() and not src.is_symlink():
        shutil.copyfile(src, dest / SOLUTION_FILE)
    kernels = solution_dir / KERNELS_DIR
    if kernels.is_dir() and not kernels.is_symlink():
        shutil.copytree(kernels, dest / KERNELS_DIR, symlinks=False, ignore_dangling_symlinks=True)
    return dest
