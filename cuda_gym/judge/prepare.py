"""Per-task work done once, ahead of the episodes that need it: probes and baselines of a task set.

The first judgement of a task pays for its probe (usable input distributions, fp64 support,
trivial answers, the speed-of-light bound) and for timing its eager and `torch.compile`
baselines; every later judgement on the same GPU model reads them from the cache
(`<cache>/probes`, `<cache>/baselines`, shared by every process that uses the cache directory).
`prepare_tasks` pays for them before training starts, in parallel:

    report = prepare_tasks(load_handwritten(), JudgeConfig(device="cuda"), workers=4)

or from the shell: `cuda-gym prepare --tasks builtin --device cuda --workers 4`.

The baselines are timed through `Judge.task_baselines`, as a judgement's first timing does: a
trusted driver of their own, once per task, whatever number of processes ask at once.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from cuda_gym.errors import ConfigError, WorkerError
from cuda_gym.judge.baselines import has_baselines
from cuda_gym.judge.client import JudgeClient
from cuda_gym.judge.config import JudgeConfig
from cuda_gym.tasks import Task

logger = logging.getLogger(__name__)


@dataclass
class TaskPreparation:
    """What preparing one task did.

    Attributes:
        task_id: The task.
        probed: The probe ran now (False: it was cached).
        baselined: The baselines were timed now (False: they were cached).
        ok: The probe and every configured baseline are in the cache now.
        error: Why not, when not ok.
        duration_s: Wall-clock seconds spent on this task, slot waits included.
    """

    task_id: str
    probed: bool = False
    baselined: bool = False
    ok: bool = False
    error: str | None = None
    duration_s: float = 0.0


@dataclass
class PrepareReport:
    """What `prepare_tasks` did.

    Attributes:
        tasks: One entry per task, in the order given.
        duration_s: Wall-clock seconds of the whole preparation.
    """

    tasks: list[TaskPreparation] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Every task is prepared."""
        return all(t.ok for t in self.tasks)

    def summary(self) -> dict:
        """Counts for a log line or the CLI: tasks, probed, baselined, already cached, failed."""
        return {
            "tasks": len(self.tasks),
            "probed": sum(t.probed for t in self.tasks),
            "baselined": sum(t.baselined for t in self.tasks),
            "already_cached": sum(t.ok and not (t.probed or t.baselined) for t in self.tasks),
            "failed": {t.task_id: t.error for t in self.tasks if not t.ok},
            "duration_s": round(self.duration_s, 2),
        }


def prepare_task(client: JudgeClient, task: Task) -> TaskPreparation:
    """Probe `task` and time its baselines unless cached; failures are reported, not raised."""
    start = time.monotonic()
    config, judge = client.config, client.judge
    if task.device == "any":
        task = task.for_device(config.device)
    prep = TaskPreparation(task.task_id)
    try:
        run: dict = {}
        with client.slots.hold(timed=False):
            judge.probe_task(task, run)
        prep.probed = bool(run)  # filled only when the probe ran now
        timed: dict = {}
        with client.slots.hold(timed=True):
            baselines = judge.task_baselines(task, run=timed)
        prep.baselined = bool(timed)
        if not has_baselines(baselines, config.baselines):
            errors = "; ".join(f"{k}: {v.get('error')}" for k, v in baselines.items())
            raise WorkerError(f"the baselines of task {task.task_id!r} were not timed: {errors}")
        prep.ok = True
    except WorkerError as exc:
        prep.error = str(exc)
        logger.warning("preparing task %s failed: %s", task.task_id, exc)
    prep.duration_s = time.monotonic() - start
    return prep


def prepare_tasks(
    tasks: Iterable[Task],
    config: JudgeConfig,
    *,
    workers: int = 1,
    progress: bool = True,
    client: JudgeClient | None = None,
) -> PrepareReport:
    """Probe every task and time its baselines ahead of the episodes, `workers` tasks at a time.

    Tasks whose probe and baselines are cached cost a file read. Timings hold the process's timed
    judge slot (one per GPU), so workers beyond the GPU count overlap probes with timings; a
    failing task is reported in its entry and the others go on.

    Args:
        tasks: The tasks (raw or specialised for `config.device`).
        config: The judge configuration of the episodes: its device, cache directory, timing
            method (warm-up and timed runs) and baselines are what the cache keys hold.
        workers: Tasks prepared at once.
        progress: Show a progress bar (tqdm) on stderr.
        client: The judge client to use (default: a new one for `config`, which shares the
            process's judge slots with every env of the same device).

    Returns:
        A PrepareReport with one entry per task, in the order given.
    """
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    tasks = list(tasks)
    client = client or JudgeClient(config)
    start = time.monotonic()
    results: list[TaskPreparation | None] = [None] * len(tasks)
    bar = _progress_bar(len(tasks)) if progress else None
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="cuda_gym_prepare") as pool:
            futures = {pool.submit(prepare_task, client, t): i for i, t in enumerate(tasks)}
            for future in as_completed(futures):
                prep = results[futures[future]] = future.result()
                if bar is not None:
                    bar.set_postfix_str(f"{prep.task_id} {'ok' if prep.ok else 'FAILED'}")
                    bar.update()
    finally:
        if bar is not None:
            bar.close()
    return PrepareReport(tasks=list(results), duration_s=time.monotonic() - start)


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc="prepare", unit="task", file=sys.stderr, dynamic_ncols=True)
