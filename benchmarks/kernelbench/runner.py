"""Run the harness: problems in, per-problem records on disk, metrics and report out.

Resumable: a problem whose record exists (status "done" or "missing") is not run again; an
"error" record is retried. A run directory belongs to one configuration (`run.json`); resuming
with different result-changing settings is refused.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from benchmarks.kernelbench.baseline_file import BaselineFile, shipped_baseline_files
from benchmarks.kernelbench.config import HARNESS_VERSION, HarnessConfig
from benchmarks.kernelbench.executor import make_executor
from benchmarks.kernelbench.footprint import estimate_bytes
from benchmarks.kernelbench.jobs import ProblemJob, run_problem
from benchmarks.kernelbench.metrics import Outcome, effort, summarize
from benchmarks.kernelbench.problems import Problem, discover_problems
from benchmarks.kernelbench.records import FINISHED, OUT_OF_MEMORY, read_record
from benchmarks.kernelbench.report import speedup_spread, write_report
from benchmarks.kernelbench.system import system_facts
from cuda_gym.errors import ConfigError, CudaGymError
from cuda_gym.judge.baselines import JsonCache, baseline_key, has_baselines
from cuda_gym.judge.device import device_info
from cuda_gym.judge.verdict import Flag

logger = logging.getLogger(__name__)


def claim_run_dir(cfg: HarnessConfig) -> None:
    """Create out/ and its run.json, or check that a resumed run has the same settings."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    run_file = cfg.out / "run.json"
    fingerprint = cfg.fingerprint()
    if run_file.is_file():
        previous = json.loads(run_file.read_text()).get("fingerprint")
        if previous and "mode" in previous:  # written before the field was `tolerance_mode`
            previous.setdefault("tolerance_mode", previous.pop("mode"))
        if previous != fingerprint:
            changed = sorted(k for k in fingerprint if (previous or {}).get(k) != fingerprint[k])
            raise ConfigError(
                f"{cfg.out} holds a run with other settings ({', '.join(changed)}); "
                "use another --out, or the same settings to resume it"
            )
        return
    run_file.write_text(
        json.dumps({"harness_version": HARNESS_VERSION, "fingerprint": fingerprint}, indent=1)
        + "\n"
    )


def record_invocation(
    cfg: HarnessConfig,
    wall_s: float,
    system: dict | None = None,
    baselines_at_start: dict | None = None,
) -> list[dict]:
    """Add this invocation's wall time (and system facts) to run.json; return every invocation's.

    A run resumed over several invocations (--max-wall-s, interruptions) reports its total; the
    facts of the machine each ran on let `--report-only` rebuild the report elsewhere;
    `baselines_at_start` (how many problems' baselines were known before it began) tells how much
    of its time went into timing them.
    """
    run_file = cfg.out / "run.json"
    data = json.loads(run_file.read_text())
    entry = {
        "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(wall_s, 1),
    }
    if system is not None:
        entry.update(levels=list(cfg.levels), system=system)
    if baselines_at_start is not None:
        entry["baselines_at_start"] = baselines_at_start
    data.setdefault("invocations", []).append(entry)
    tmp = run_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(run_file)
    return data["invocations"]


class Progress:
    """One line per finished problem on stderr: count, outcome, rate and time left."""

    def __init__(self, total: int, already: int, stream=None) -> None:
        self.total = total
        self.done = already
        self.fresh = 0
        self.start = time.monotonic()
        self.stream = stream

    def update(self, record: dict) -> None:
        """Report one finished problem (one deferred to the alone pass is not counted yet)."""
        if record.get("status") != OUT_OF_MEMORY:
            self.done += 1
            self.fresh += 1
        elapsed = time.monotonic() - self.start
        rate = self.fresh / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        if record.get("status") != "done":
            outcome = record.get("status", "?")
        elif record.get("correct"):
            se, sc = record.get("speedup_vs_eager"), record.get("speedup_vs_compile")
            outcome = (
                "correct"
                + (f" {se:.2f}x eager" if se else "")
                + (f" {sc:.2f}x compile" if sc else "")
            )
        else:
            outcome = "incorrect"
        width = len(str(self.total))
        print(
            f"[{self.done:>{width}}/{self.total}] {record['problem']:<48} {outcome:<36} "
            f"{record.get('wall_s', 0):6.1f}s  {rate * 60:5.1f}/min  ~{left / 60:5.1f} min left",
            file=self.stream or sys.stderr,
            flush=True,
        )


def _baseline_keys(cfg: HarnessConfig, problems: list[Problem]) -> dict[str, dict]:
    info = device_info(cfg.device)
    jc = cfg.judge_config()
    keys = {}
    for problem in problems:
        try:
            task = problem.task().for_device(cfg.device)
        except CudaGymError:
            continue
        keys[baseline_key(task.content_hash, info, jc)] = {
            "problem": problem.key,
            "task_hash": task.content_hash,
            "device_name": info.name,
            "torch": info.torch_version,
            "cuda": info.cuda_version,
            "driver": info.driver_version,
            "warmup_runs": jc.warmup_runs,
            "timed_runs": jc.timed_runs,
        }
    return keys


def recorded_system(out: Path, invocations: list[dict]) -> tuple[dict, str]:
    """The system facts of the run's last invocation that recorded them, and where they came from.

    Invocations record them in run.json; runs begun before that have them only in the report
    their last invocation wrote.
    """
    for inv in reversed(invocations):
        if inv.get("system"):
            return inv["system"], f"run.json (invocation ended {inv.get('ended')})"
    report_file = out / "report.json"
    if report_file.is_file():
        system = json.loads(report_file.read_text()).get("system")
        if system:
            return system, "report.json (as the run's last invocation wrote it)"
    raise ConfigError(
        f"{out} records no system facts to report with: run the harness there once on the "
        "run's machine (a run with nothing left to judge only writes its report)"
    )


def rebuild_report(cfg: HarnessConfig) -> dict:
    """--report-only: the report of every problem in cfg's levels from OUT's records alone."""
    problems = discover_problems(cfg.kernelbench_dir, cfg.levels, cfg.problems, cfg.limit)
    run_file = cfg.out / "run.json"
    if not run_file.is_file():
        raise ConfigError(f"{cfg.out} holds no run (no run.json) to report on")
    claim_run_dir(cfg)  # the same result settings as the run, or an error
    invocations = json.loads(run_file.read_text()).get("invocations", [])
    system, source = recorded_system(cfg.out, invocations)
    records = [read_record(cfg.out, p) for p in problems]
    report = build_report(cfg, problems, records, 0.0, system)
    report["system_source"] = source
    report["invocations"] = invocations
    report["total_wall_s"] = sum(i["wall_s"] for i in invocations)
    report["complete"] = all(r and r.get("status") in FINISHED for r in records)
    write_report(report, [r for r in records if r], cfg.out, cfg.plots)
    return report


def run(cfg: HarnessConfig) -> dict:
    """Run every problem not yet recorded, then write the report; return the report dict."""
    if cfg.report_only:
        return rebuild_report(cfg)
    run_start = time.monotonic()
    problems = discover_problems(cfg.kernelbench_dir, cfg.levels, cfg.problems, cfg.limit)
    claim_run_dir(cfg)
    cache = JsonCache(cfg.judge_config().resolved_cache_dir, "baselines")
    baseline_file = BaselineFile(cfg.resolved_baselines_file)
    seeded = baseline_file.seed_cache(cache)
    if seeded:
        logger.info("%d baseline entries loaded from %s", seeded, baseline_file.path)
    wanted = _baseline_keys(cfg, problems)
    for path in shipped_baseline_files() if cfg.shipped_baselines else []:
        shipped = BaselineFile(path)
        seeded = shipped.seed_cache(cache)
        if seeded:
            logger.info("%d baseline entries loaded from %s (shipped)", seeded, path)
        stale, differ = shipped.mismatches(wanted)
        if stale:
            logger.warning(
                "%s: %d baselines for this GPU model do not apply here (they differ in %s); "
                "those problems' baselines are timed in this run",
                path.name,
                stale,
                ", ".join(differ) or "something the file does not record, e.g. the driver",
            )
    known = sum(has_baselines(cache.get(key), cfg.baselines) for key in wanted)
    logger.info("baselines known for %d of %d problems at the start", known, len(wanted))

    todo = []
    # Problems that ran out of memory beside others in an earlier invocation, which stopped
    # before its alone pass (--max-wall-s): judged alone first, or beside others they would
    # run out again.
    deferred = []
    for problem in problems:
        record = read_record(cfg.out, problem)
        if record is not None and record.get("status") == OUT_OF_MEMORY:
            deferred.append(problem)
        elif record is None or record.get("status") not in FINISHED:
            todo.append(problem)
    progress = Progress(len(problems), len(problems) - len(todo) - len(deferred))
    deadline = run_start + cfg.max_wall_s if cfg.max_wall_s else None
    alone = replace(cfg, workers=len(cfg.gpus) if cfg.gpus else 1)
    try:
        stopped = False
        if deferred:
            logger.info("judging %d problem(s) alone first (out of memory before)", len(deferred))
            jobs = [ProblemJob(p, alone, alone=True) for p in deferred]
            stopped = _run_jobs(alone, jobs, progress, deadline)
        if not stopped:
            stopped = _run_jobs(cfg, [ProblemJob(p, cfg) for p in todo], progress, deadline)
        # Problems that ran out of memory beside others: once more, one per GPU.
        again = [p for p in todo if (read_record(cfg.out, p) or {}).get("status") == OUT_OF_MEMORY]
        if again and not stopped:
            logger.info("judging %d problem(s) again alone on their GPU", len(again))
            jobs = [ProblemJob(p, alone, alone=True) for p in again]
            stopped = _run_jobs(alone, jobs, progress, deadline)
    finally:
        baseline_file.collect(cache, wanted)
        baseline_file.save()

    records = [read_record(cfg.out, p) for p in problems]
    system = system_facts(cfg.device, cfg.kernelbench_dir)
    report = build_report(cfg, problems, records, time.monotonic() - run_start, system)
    report["invocations"] = record_invocation(
        cfg, report["run_wall_s"], system, {"known": known, "problems": len(wanted)}
    )
    report["total_wall_s"] = sum(i["wall_s"] for i in report["invocations"])
    report["complete"] = not stopped and all(r and r.get("status") in FINISHED for r in records)
    write_report(report, [r for r in records if r], cfg.out, cfg.plots)
    return report


# Share of the GPUs' memory that the problems judged at once may need together (estimates).
MEMORY_SHARE = 0.9


def memory_budget(cfg: HarnessConfig) -> float | None:
    """GPU bytes the problems in flight may need together, or None for no limit.

    Only where several problems share a GPU. With several GPUs it is their sum: a pair that
    still lands on one GPU and runs out of memory is judged again alone.
    """
    if cfg.device != "cuda" or cfg.workers <= max(1, len(cfg.gpus or ())):
        return None
    try:
        import torch

        indices = list(cfg.gpus or range(torch.cuda.device_count()))
        per_gpu = min(torch.cuda.get_device_properties(i).total_memory for i in indices)
    except Exception as exc:  # no CUDA here after all: no limit, the OOM reruns remain
        logger.warning("no GPU memory budget (%s)", exc)
        return None
    return MEMORY_SHARE * per_gpu * len(indices)


def _job_bytes(job: ProblemJob) -> float:
    return float(estimate_bytes(job.problem, job.config.tolerance_mode) or 0)


def _run_jobs(cfg: HarnessConfig, jobs: list, progress: Progress, deadline: float | None) -> bool:
    """Run the jobs on cfg's workers; True when stopped by the deadline.

    Where several problems share a GPU, those whose estimated memory (footprint.py) would not
    fit beside each other are not judged at once.
    """
    executor = make_executor(cfg.workers, cfg.gpus)
    budget = memory_budget(cfg)
    cost = _job_bytes if budget is not None else None
    try:
        # Each job writes its own record, so jobs still in flight when the run stops (the
        # deadline, an interrupt) are kept.
        for record in executor.map_unordered(run_problem, jobs, cost, budget):
            progress.update(record)
            if deadline and time.monotonic() > deadline and progress.done < progress.total:
                logger.warning("--max-wall-s reached: stopping; run again to resume")
                return True
    finally:
        executor.close()
    return False


def build_report(
    cfg: HarnessConfig,
    problems: list[Problem],
    records: list[dict | None],
    run_wall_s: float,
    system: dict | None = None,
) -> dict:
    """The report dict: configuration, system, metrics, effort and per-problem rows.

    `system`: the facts of the machine that judged (default: this one's, `system_facts`).
    """
    by_level: dict[int, list[Outcome]] = {}
    final_by_level: dict[int, list[Outcome]] = {}
    rows = []
    for problem, record in zip(problems, records):
        by_level.setdefault(problem.level, []).append(Outcome.from_record(record))
        if cfg.kind == "agent":
            final = (record or {}).get("agent", {}).get("final")
            ok = bool(record) and record.get("status") == "done" and final is not None
            final_by_level.setdefault(problem.level, []).append(
                Outcome(
                    ok and bool(final["correct"]),
                    final["speedup_vs_eager"] if ok else None,
                    final["speedup_vs_compile"] if ok else None,
                )
            )
        record = record or {"status": "not run", "correct": False}
        rows.append(
            {
                "problem": problem.key,
                "status": record.get("status"),
                "correct": bool(record.get("correct")),
                "speedup_vs_eager": record.get("speedup_vs_eager"),
                "speedup_vs_compile": record.get("speedup_vs_compile"),
                "time_ms": record.get("time_ms"),
                "flags": record.get("flags", []),
                "error": record.get("error"),
                "file_sha256": problem.file_sha256,
                "task_hash": record.get("task_hash"),
                "wall_s": record.get("wall_s"),
            }
        )
    present = [r for r in records if r]
    efforts = {
        f"level{lv}": effort([r for r in present if r["level"] == lv]) for lv in sorted(by_level)
    }
    efforts["overall"] = effort(present)
    numerics = next(
        (
            (r.get("verdict") or {}).get("flags", {}).get(Flag.NUMERICS)
            for r in present
            if (r.get("verdict") or {}).get("flags", {}).get(Flag.NUMERICS)
        ),
        None,
    )
    jc = cfg.judge_config()
    timer = (
        "CUDA events around device-wide synchronisation, L2 flushed before every call"
        if cfg.device == "cuda"
        else "host clock"
    )
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("done", "missing", "error")}
    counts["problems"] = len(rows)
    counts["not_run"] = sum(1 for r in rows if r["status"] == "not run")
    return {
        "harness_version": HARNESS_VERSION,
        "solver": _solver(cfg),
        "config": cfg.to_dict(),
        "judge_config": {
            k: (
                str(v)
                if v is not None and not isinstance(v, (int, float, str, bool, list, tuple))
                else v
            )
            for k, v in jc.__dict__.items()
        },
        "system": system if system is not None else system_facts(cfg.device, cfg.kernelbench_dir),
        "numerics": numerics
        or "TF32 off in cuBLAS and cuDNN, float32 matmul precision 'highest' (judge policy)",
        "timing": {
            "warmup_runs": jc.warmup_runs,
            "timed_runs": jc.timed_runs,
            "correctness_trials": jc.correctness_trials,
            "statistic": "median",
            "timer": timer,
            "description": f"median of {jc.timed_runs} calls after {jc.warmup_runs} warm-up "
            f"calls, fresh input clones per call; {timer}; {jc.correctness_trials} "
            "correctness input sets",
        },
        "tolerance_mode": cfg.tolerance_mode,
        "baselines_file": str(cfg.resolved_baselines_file),
        "counts": counts,
        "metrics": summarize(by_level),
        "final_submission": summarize(final_by_level) if final_by_level else None,
        "speedup_spread": speedup_spread(present),
        "effort": efforts,
        "run_wall_s": run_wall_s,
        # Which trees judged the records (a run resumed over several commits has several);
        # records from before commits were recorded count as "unrecorded".
        "records_by_harness_commit": dict(
            Counter(r.get("harness_commit") or "unrecorded" for r in present).most_common()
        ),
        "problems": rows,
    }


def _solver(cfg: HarnessConfig) -> str:
    if cfg.kind == "reference":
        return "reference as solution (sanity run)"
    if cfg.kind == "solutions":
        return f"solutions from {cfg.solutions_dir}"
    if cfg.agent == "openai":
        return f"openai agent, model {cfg.model} ({cfg.tool_mode} tools)"
    return f"{cfg.agent} agent"
