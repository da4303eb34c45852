"""The synthesis pipeline: compose candidates, filter them in parallel, keep the first N good ones.

    from cuda_gym.synth import SynthConfig, synthesize
    run = synthesize(SynthConfig(n=20, device="cpu", seed=0))
    run.tasks        # accepted tasks (dicts with source, ops, filters, provenance)

Candidates are numbered; candidate i depends only on (seed, i). Cheap checks run here
(`stochastic_op`, `decontamination`, `near_duplicate`), execution filters in the pool. The
accepted set is the first N accepted candidates in index order, whatever order the workers
finish in, so a fixed seed and software stack give the same set (timings aside).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from cuda_gym.errors import is_out_of_memory
from cuda_gym.synth.catalogue import catalogue, get_op
from cuda_gym.synth.compose import Candidate, compose
from cuda_gym.synth.config import SynthConfig
from cuda_gym.synth.dedup import ReferenceIndex, chain_signature
from cuda_gym.synth.filters import (
    RESOURCE,
    WORKER_FILTERS,
    FilterReport,
    FilterSettings,
)
from cuda_gym.synth.pool import JobPool, LocalProcessPool

logger = logging.getLogger(__name__)

PARENT_FILTERS = ("stochastic_op", "decontamination", "near_duplicate")
ALL_FILTERS = PARENT_FILTERS + WORKER_FILTERS + ("worker", RESOURCE)
# A candidate that ran out of device memory (other workers held it) is filtered again, alone on
# the device, up to this many times before it is given up (and retried by a resumed run).
RESOURCE_RETRIES = 2


@dataclass
class SynthRun:
    """The result of a run.

    Attributes:
        config: The configuration.
        tasks: Accepted tasks in index order (dicts; see `task_record`).
        records: Every candidate looked at, accepted or not, in index order.
        elapsed_s: Wall-clock seconds of the run (this run only, not the journal's earlier ones).
        environment: Software and device versions.
        resumed: Indices of candidates taken from the journal instead of being filtered again
            (the per-minute rates count only the others).
        stopped_by_time_limit: The run ended at `config.time_limit_s`.
    """

    config: SynthConfig
    tasks: list[dict] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    elapsed_s: float = 0.0
    environment: dict = field(default_factory=dict)
    resumed: set[int] = field(default_factory=set)
    stopped_by_time_limit: bool = False

    def filter_stats(self) -> dict[str, dict]:
        """Per filter: candidates that reached it, passed it, and the conditional pass rate."""
        return filter_stats(r["filters"] for r in self.records)

    def summary(self) -> dict:
        """Counts, rates and distributions of the run."""
        lengths = Counter(t["chain_length"] for t in self.tasks)
        families = Counter(f for t in self.tasks for f in t["families"])
        minutes = self.elapsed_s / 60 if self.elapsed_s else None
        new_records = sum(1 for r in self.records if r["index"] not in self.resumed)
        new_tasks = sum(1 for t in self.tasks if t["provenance"]["index"] not in self.resumed)
        return {
            "n_requested": self.config.n,
            "n_accepted": len(self.tasks),
            "candidates": len(self.records),
            "acceptance_rate": len(self.tasks) / len(self.records) if self.records else None,
            "elapsed_s": self.elapsed_s,
            "tasks_per_minute": new_tasks / minutes if minutes else None,
            "candidates_per_minute": new_records / minutes if minutes else None,
            "filters": self.filter_stats(),
            "chain_lengths": {str(k): lengths[k] for k in sorted(lengths)},
            "families": dict(sorted(families.items())),
            "splits": dict(Counter(t["split"] for t in self.tasks)),
            "resumed_from_journal": len(self.resumed),
            "stopped_by_time_limit": self.stopped_by_time_limit,
            "environment": self.environment,
        }


def filter_stats(per_candidate: Iterable[dict]) -> dict[str, dict]:
    """Reached, passed and pass rate of each filter, from every candidate's filter results."""
    stats = {name: {"reached": 0, "passed": 0} for name in ALL_FILTERS}
    for filters in per_candidate:
        for name, result in filters.items():
            stats[name]["reached"] += 1
            stats[name]["passed"] += int(bool(result.get("passed")))
    for s in stats.values():
        s["pass_rate"] = s["passed"] / s["reached"] if s["reached"] else None
    return {k: v for k, v in stats.items() if v["reached"]}


def environment_info(device: str) -> dict:
    """Versions and device of this run (recorded in every task's provenance)."""
    import torch

    import cuda_gym

    name = platform.processor() or platform.machine()
    if device == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name()
    return {
        "cuda_gym": cuda_gym.__version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device,
        "device_name": name,
        "catalogue_size": len(catalogue()),
    }


def _split(task_id: str, fraction: float) -> str:
    bucket = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) % 10_000
    return "validation" if bucket < fraction * 10_000 else "train"


def _record(cand: Candidate) -> dict:
    return {
        "index": cand.index,
        "ops": list(cand.ops),
        "families": list(cand.families),
        "chain_length": cand.chain_length,
        "signature": chain_signature(cand.ops),
        "accepted": False,
        "failed": None,
        "filters": {},
        "source": "",
        "batch_size": cand.batch_size,
        "eager_ms": None,
        "compile_ms": None,
        "compile_s": None,
        "worker_s": None,
    }


def _reject(rec: dict, name: str, **details) -> dict:
    rec["failed"] = name
    rec["filters"][name] = {"passed": False, **details}
    return rec


class _Prefilter:
    """The checks that need no execution: stochastic ops, decontamination, earlier duplicates."""

    def __init__(self, config: SynthConfig) -> None:
        self.config = config
        self.refs = (
            ReferenceIndex(config.decontaminate_against) if config.decontaminate_against else None
        )
        self.accepted_signatures: set[str] = set()

    def check(self, cand: Candidate, rec: dict) -> bool:
        stochastic = [o for o in cand.ops if get_op(o).stochastic]
        if stochastic:
            _reject(rec, "stochastic_op", ops=stochastic)
            return False
        rec["filters"]["stochastic_op"] = {"passed": True}
        if self.refs is not None:
            threshold = self.config.similarity_threshold
            match = self.refs.closest(cand.source(), threshold)
            if match.score > threshold:
                _reject(rec, "decontamination", similarity=match.score, reference=match.path)
                return False
            rec["filters"]["decontamination"] = {"passed": True, "references": len(self.refs)}
        if rec["signature"] in self.accepted_signatures:
            _reject(rec, "near_duplicate", signature=rec["signature"])
            return False
        return True


def _apply_report(rec: dict, report: FilterReport) -> None:
    rec["filters"].update(report.filters)
    rec.update(
        accepted=report.accepted,
        failed=report.failed,
        source=report.source,
        batch_size=report.batch_size,
        eager_ms=report.eager_ms,
        compile_ms=report.compile_ms,
        compile_s=report.compile_s,
        worker_s=report.worker_s,
    )


def default_pool(config: SynthConfig) -> LocalProcessPool:
    """Local worker processes; on CUDA, workers are spread over the visible GPUs."""
    per_worker = None
    if config.device == "cuda":
        import torch

        gpus = torch.cuda.device_count()
        if gpus > 1:
            per_worker = [{"CUDA_VISIBLE_DEVICES": str(i % gpus)} for i in range(config.workers)]
    threads = max(1, (os.cpu_count() or 1) // config.workers)
    env = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "CUDA_GYM_SYNTH_THREADS": str(threads)}
    return LocalProcessPool(
        "cuda_gym.synth.filters:filter_job",
        workers=config.workers,
        timeout_s=config.task_timeout_s,
        env=env,
        per_worker_env=per_worker,
    )


class _Journal:
    """Finished candidates, one JSON line each, tagged with the settings that produced them."""

    def __init__(self, config: SynthConfig) -> None:
        self.path = Path(config.journal) if config.journal else None
        self.fingerprint = config.fingerprint()

    def load(self) -> dict[int, dict]:
        """The journal's records made with the same settings, by candidate index."""
        if self.path is None or not self.path.exists():
            return {}
        records, skipped = {}, 0
        for line in self.path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut short when a run was killed
                skipped += 1
                continue
            if row.get("fingerprint") != self.fingerprint:
                skipped += 1
            elif row["record"].get("failed") != RESOURCE:  # ran out of memory: try again
                records[row["record"]["index"]] = row["record"]
        if skipped:
            logger.warning("journal %s: %d lines from other settings ignored", self.path, skipped)
        return records

    def append(self, rec: dict) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({"fingerprint": self.fingerprint, "record": rec}, default=str))
            f.write("\n")


def _count_prefix(records: dict[int, dict], n: int) -> tuple[int, int]:
    """(accepted non-duplicates, length) of the completed index prefix, stopping at n accepted."""
    seen: set[str] = set()
    accepted, i = 0, 0
    while i in records and accepted < n:
        rec = records[i]
        if rec["accepted"] and rec["signature"] not in seen:
            seen.add(rec["signature"])
            accepted += 1
        i += 1
    return accepted, i


def synthesize(
    config: SynthConfig, pool: JobPool | None = None, progress: bool = False
) -> SynthRun:
    """Run the pipeline until `config.n` tasks are accepted or the candidate limit is reached.

    Args:
        config: What to make.
        pool: Where the execution filters run (default: `default_pool(config)`; closed here).
        progress: Show a progress bar on stderr.
    """
    start = time.monotonic()
    run = SynthRun(config=config, environment=environment_info(config.device))
    prefilter = _Prefilter(config)
    settings = FilterSettings(
        device=config.device,
        window_ms=config.window,
        compile_check=config.compile_check,
        calibrate=config.calibrate,
    )
    journal = _Journal(config)
    records = journal.load()  # finished candidates by index
    run.resumed = set(records)
    for rec in records.values():
        if rec["accepted"]:
            prefilter.accepted_signatures.add(rec["signature"])
    owns_pool = pool is None
    pool = pool or default_pool(config)
    parked: dict[int, dict] = {}  # candidates in the pool
    retries: dict[int, int] = {}  # out-of-memory retries per candidate
    exclusive = replace(settings, exclusive=True)
    bar = _progress_bar(config.n) if progress else None
    next_index, in_flight = 0, 2 * config.workers
    try:
        while True:
            accepted, prefix = _count_prefix(records, config.n)
            if bar is not None:
                bar.n = accepted
                bar.set_postfix(candidates=len(records), refresh=False)
                bar.refresh()
            if accepted >= config.n:
                break
            if config.time_limit_s and time.monotonic() - start > config.time_limit_s:
                run.stopped_by_time_limit = True
                break
            while pool.pending < in_flight and next_index < config.candidate_limit:
                if next_index in records:  # finished in an earlier run (journal)
                    next_index += 1
                    continue
                cand = compose(next_index, config)
                rec = _record(cand)
                if prefilter.check(cand, rec):
                    parked[next_index] = rec
                    pool.submit(next_index, (cand, settings))
                else:
                    rec["source"] = cand.source()
                    records[next_index] = rec
                    journal.append(rec)
                next_index += 1
            if pool.pending == 0:
                break
            result = pool.next_result()
            rec = parked.pop(result.key)
            out_of_memory = (result.ok and result.value.failed == RESOURCE) or (
                not result.ok and is_out_of_memory(result.error)
            )
            tries = retries.get(result.key, 0)
            if out_of_memory and tries < RESOURCE_RETRIES:
                retries[result.key] = tries + 1
                parked[result.key] = rec
                pool.submit(result.key, (compose(result.key, config), exclusive))
                continue
            if result.ok:
                _apply_report(rec, result.value)
                if rec["accepted"]:
                    prefilter.accepted_signatures.add(rec["signature"])
            elif out_of_memory:
                _reject(rec, RESOURCE, error=result.error[-1500:])
            else:
                _reject(rec, "worker", error=result.error[-1500:])
            rec["resource_retries"] = tries
            records[result.key] = rec
            journal.append(rec)
    finally:
        if owns_pool:
            pool.close()
        if bar is not None:
            bar.close()
    _, prefix = _count_prefix(records, config.n)
    run.records = [records[i] for i in range(prefix)]
    run.tasks = _select(run, config)
    run.elapsed_s = time.monotonic() - start
    return run


def _select(run: SynthRun, config: SynthConfig) -> list[dict]:
    """Accepted records in index order, near-duplicates dropped, as task dicts."""
    seen: set[str] = set()
    tasks = []
    for rec in run.records:
        if not rec["accepted"]:
            continue
        if rec["signature"] in seen:
            rec["accepted"] = False
            _reject(rec, "near_duplicate", signature=rec["signature"])
            continue
        seen.add(rec["signature"])
        rec["filters"]["near_duplicate"] = {"passed": True}
        tasks.append(task_record(rec, config, run.environment))
        if len(tasks) >= config.n:
            break
    return tasks


def task_record(rec: dict, config: SynthConfig, environment: dict) -> dict:
    """One accepted task: id, name, split, source and its provenance."""
    task_id = f"{config.id_prefix}_{config.seed}_{rec['index']:05d}"
    name = "_".join(o.split(".")[-1] for o in rec["ops"])
    provenance = {
        "generator": "cuda_gym.synth",
        "seed": config.seed,
        "index": rec["index"],
        "ops": rec["ops"],
        "families": rec["families"],
        "filters": rec["filters"],
        "eager_ms": rec["eager_ms"],
        "compile_ms": rec["compile_ms"],
        "compile_s": rec["compile_s"],
        "batch_size": rec["batch_size"],
        "window_ms": list(config.window),
        "compile_checked": config.compile_check,
        **environment,
    }
    return {
        "task_id": task_id,
        "name": name,
        "split": _split(task_id, config.validation_fraction),
        "source": rec["source"],
        "device": config.device,
        "chain_length": rec["chain_length"],
        "ops": rec["ops"],
        "families": rec["families"],
        "eager_ms": rec["eager_ms"],
        "compile_ms": rec["compile_ms"],
        "provenance": provenance,
    }


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc="synth", unit="task", file=sys.stderr, dynamic_ncols=True)
