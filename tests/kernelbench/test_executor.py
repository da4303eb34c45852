"""The executors: in-process, and worker processes pinned to one GPU index each."""

import os
import time

from benchmarks.kernelbench.executor import InlineExecutor, ProcessExecutor, make_executor


def mark_started(args: tuple[str, int]) -> int:
    folder, job = args
    open(os.path.join(folder, f"started_{job}"), "w").close()
    time.sleep(0.2 * job)
    return job


def visible_gpu(job: int) -> tuple[int, str | None]:
    return job, os.environ.get("CUDA_VISIBLE_DEVICES")


def worker_and_gpu(job: int) -> tuple[int, str | None]:
    time.sleep(0.05)
    return os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES")


def test_inline_runs_in_order_here():
    ex = make_executor(1)
    assert isinstance(ex, InlineExecutor)
    assert list(ex.map_unordered(lambda x: x * 2, [1, 2, 3])) == [2, 4, 6]


def test_process_workers_each_see_one_gpu():
    ex = make_executor(2, gpus=(5, 7))
    assert isinstance(ex, ProcessExecutor)
    try:
        results = list(ex.map_unordered(visible_gpu, range(6)))
    finally:
        ex.close()
    assert sorted(job for job, _ in results) == list(range(6))
    assert {gpu for _, gpu in results} <= {"5", "7"}


def test_several_workers_per_gpu_are_spread_evenly():
    ex = make_executor(4, gpus=(5, 7))
    try:
        # Each job reports its worker's pid and GPU: two workers see each GPU.
        results = list(ex.map_unordered(worker_and_gpu, range(40)))
    finally:
        ex.close()
    per_worker = dict(results)
    assert (
        sorted(per_worker.values()).count("5") <= 2 and sorted(per_worker.values()).count("7") <= 2
    )


def test_a_caller_that_stops_starts_no_further_job(tmp_path):
    # The harness stops at its deadline after a result: the jobs then in flight finish, but no
    # new one starts (the slot freed by that result used to start one more first).
    ex = ProcessExecutor(2)
    try:
        for job in ex.map_unordered(mark_started, [(str(tmp_path), j) for j in range(6)]):
            assert job == 0
            time.sleep(0.5)  # the caller's own work on the result (the harness's progress line)
            break
    finally:
        ex.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["started_0", "started_1"]
