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


def log_span(args: tuple[str, str, float]) -> str:
    folder, name, seconds = args
    start = time.monotonic()
    time.sleep(seconds)
    with open(os.path.join(folder, "spans"), "a") as f:
        f.write(f"{name} {start} {time.monotonic()}\n")
    return name


def test_jobs_that_would_not_fit_together_are_not_run_at_once(tmp_path):
    # Cost as GPU memory: two "big" jobs (70 each) never run at once under a budget of 100;
    # the small ones (5) start beside a big one, also ahead of a big one that must wait.
    jobs = [
        (str(tmp_path), name, 0.6 if name.startswith("big") else 0.2)
        for name in ("big1", "big2", "small1", "small2", "small3", "big3")
    ]
    ex = ProcessExecutor(3)
    try:
        done = list(
            ex.map_unordered(
                log_span, jobs, cost=lambda j: 70 if j[1].startswith("big") else 5, budget=100
            )
        )
    finally:
        ex.close()
    assert sorted(done) == sorted(j[1] for j in jobs)
    spans = {}
    for line in (tmp_path / "spans").read_text().splitlines():
        name, start, end = line.split()
        spans[name] = (float(start), float(end))
    bigs = sorted(spans[n] for n in spans if n.startswith("big"))
    assert all(a[1] <= b[0] for a, b in zip(bigs, bigs[1:])), bigs  # one big at a time
    # A small one ran beside the first big one (not after all of them).
    assert any(spans[s][0] < spans["big1"][1] for s in ("small1", "small2", "small3"))


def test_a_job_costing_more_than_the_budget_runs_alone(tmp_path):
    jobs = [(str(tmp_path), name, 0.3) for name in ("huge", "small")]
    ex = ProcessExecutor(2)
    try:
        done = list(
            ex.map_unordered(
                log_span, jobs, cost=lambda j: 500 if j[1] == "huge" else 5, budget=100
            )
        )
    finally:
        ex.close()
    assert sorted(done) == ["huge", "small"]
    spans = {
        line.split()[0]: [float(x) for x in line.split()[1:]]
        for line in (tmp_path / "spans").read_text().splitlines()
    }
    assert spans["huge"][1] <= spans["small"][0]
