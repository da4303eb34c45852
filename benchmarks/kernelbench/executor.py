"""Where problem jobs run: in this process, or in a pool of worker processes (one GPU each).

Both share one small interface, `map_unordered(fn, items)`, so a shared execution service can
take their place. Judge work already runs in child processes; workers add parallelism across
problems, and with `gpus` each worker sees only its own GPU (CUDA_VISIBLE_DEVICES). Several
workers may share a GPU: the judge's device gate (cuda_gym.runtime.device_gate) lets them overlap
everything but their timing.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol


class Executor(Protocol):
    """Runs `fn(item)` for every item; yields the results as they finish."""

    def map_unordered(
        self,
        fn: Callable[[Any], Any],
        items: Iterable[Any],
        cost: Callable[[Any], float] | None = None,
        budget: float | None = None,
    ) -> Iterator[Any]:
        """Results in completion order; jobs in flight together cost at most `budget`."""
        ...

    def close(self) -> None:
        """Release the workers."""
        ...


class InlineExecutor:
    """Runs jobs one after another in this process."""

    def map_unordered(
        self,
        fn: Callable[[Any], Any],
        items: Iterable[Any],
        cost: Callable[[Any], float] | None = None,
        budget: float | None = None,
    ) -> Iterator[Any]:
        """Results in submission order (= completion order); one job at a time fits any budget."""
        for item in items:
            yield fn(item)

    def close(self) -> None:
        """Nothing to release."""


def _init_worker(gpu_queue) -> None:
    if gpu_queue is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu_queue.get())


class ProcessExecutor:
    """A pool of `workers` spawned processes; with `gpus`, worker i sees only GPU gpus[i % n].

    At most `workers` jobs are in flight; an interrupted run loses only the jobs in flight, and
    a caller that stops iterating starts no further job.
    """

    def __init__(self, workers: int, gpus: tuple[int, ...] | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")
        queue = None
        if gpus:
            queue = ctx.Queue()
            for i in range(workers):
                queue.put(gpus[i % len(gpus)])
        self.workers = workers
        self._pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(queue,)
        )

    def map_unordered(
        self,
        fn: Callable[[Any], Any],
        items: Iterable[Any],
        cost: Callable[[Any], float] | None = None,
        budget: float | None = None,
    ) -> Iterator[Any]:
        """Results in completion order; a job's exception is raised when its turn comes.

        With `cost` and `budget`, jobs in flight together cost at most `budget` (e.g. GPU
        memory): a job that does not fit waits, and later jobs that fit start before it. A job
        that costs more than the whole budget runs when nothing else does.
        """
        waiting = list(items)
        pending: dict[Future, float] = {}
        costs = [cost(item) if cost else 0.0 for item in waiting]

        def admit() -> None:
            used = sum(pending.values())
            i = 0
            while len(pending) < self.workers and i < len(waiting):
                if budget is None or not pending or used + costs[i] <= budget:
                    item, c = waiting.pop(i), costs.pop(i)
                    pending[self._pool.submit(fn, item)] = c
                    used += c
                else:
                    i += 1

        admit()
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                del pending[future]
                yield future.result()
                # The next job starts only when the caller asks for more: a caller that stops
                # (the harness's --max-wall-s) starts nothing after it stopped.
                admit()

    def close(self) -> None:
        """Stop the workers (jobs in flight are cancelled where possible)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def make_executor(workers: int, gpus: tuple[int, ...] | None = None) -> Executor:
    """InlineExecutor for one worker without GPU pinning, else a ProcessExecutor."""
    if workers == 1 and not gpus:
        return InlineExecutor()
    return ProcessExecutor(workers, gpus)
