"""Judging as a service: submit solutions, get verdicts, locally or on a Ray cluster.

One API, two backends:

- `LocalJudgeService`: a pool of judge threads in this process (each judgement still runs its
  build, candidate and reference in child processes).
- `RayJudgeService`: one Ray actor per worker (`num_gpus=1` on CUDA, so Ray places one per
  GPU; CPU otherwise), restarted by Ray if it dies; solutions travel as file contents, so the
  workers need no shared filesystem.

Both are thread-safe; `submit` returns a `concurrent.futures.Future` and blocks while
`max_pending` judgements are already queued or running (back-pressure); `evaluate` is the
blocking form. A judgement that the infrastructure could not finish (a worker that died) raises
`WorkerError` from the future; candidate failures are verdicts, never exceptions.

    with make_service("local", JudgeConfig(device="cpu"), workers=2) as service:
        verdict = service.evaluate(task, {"model_new.py": source, "kernels/k.cpp": kernel})
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from cuda_gym.errors import ConfigError, WorkerError
from cuda_gym.judge import Judge, JudgeConfig, Verdict
from cuda_gym.judge.device import judge_gpus
from cuda_gym.judge.judge import DeviceSlot, wait_for_background_work
from cuda_gym.runtime.slots import default_slot_sizes, judge_slots
from cuda_gym.tasks import Task

BACKENDS = ("local", "ray")


def solution_files(solution_dir: str | os.PathLike) -> dict[str, bytes]:
    """model_new.py and kernels/ of a solution directory, as {relative path: bytes}."""
    root = Path(solution_dir)
    files = {}
    if (root / "model_new.py").is_file():
        files["model_new.py"] = (root / "model_new.py").read_bytes()
    kernels = root / "kernels"
    if kernels.is_dir() and not kernels.is_symlink():
        for path in sorted(kernels.rglob("*")):
            if path.is_file() and not path.is_symlink():
                files[str(path.relative_to(root))] = path.read_bytes()
    return files


def judge_files(
    judge: Judge,
    task: Task,
    files: dict[str, bytes],
    timing: bool,
    profile: bool,
    device_slot: DeviceSlot | None = None,
):
    """Write `files` into a private directory and judge it (`device_slot`: see Judge.evaluate)."""
    with tempfile.TemporaryDirectory(prefix="cuda_gym_service_") as tmp:
        for rel, data in files.items():
            path = Path(tmp, rel)
            if ".." in Path(rel).parts or Path(rel).is_absolute():
                raise ValueError(f"solution file path {rel!r} leaves the solution directory")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return judge.evaluate(task, tmp, timing=timing, profile=profile, device_slot=device_slot)


class _Bounded:
    """Back-pressure: at most `limit` judgements queued or running."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ConfigError(f"max_pending must be at least 1, got {limit}")
        self._sem = threading.BoundedSemaphore(limit)
        self._closed = False

    def acquire(self, timeout: float | None) -> None:
        if self._closed:
            raise RuntimeError("the judge service is closed")
        if not self._sem.acquire(timeout=timeout):
            raise TimeoutError(f"no room in the judge queue within {timeout:g} s")

    def release(self, _future: Future | None = None) -> None:
        self._sem.release()


class LocalJudgeService:
    """Judge threads in this process; one Judge per thread.

    Judgements take the process-wide judge slots (`cuda_gym.runtime.slots`) that envs use too:
    a judgement holds one from the end of its build to its verdict, placed on a GPU.
    `timed_slots` replaces the device's default number of timed slots (8 per GPU, one per core
    on the CPU); envs of this process with other slot sizes do not share these slots.
    """

    def __init__(self, config: JudgeConfig, workers: int = 1, max_pending: int | None = None,
                 timed_slots: int | None = None):
        if workers < 1:
            raise ConfigError(f"workers must be at least 1, got {workers}")
        gpus = judge_gpus(config.device)
        sizes = default_slot_sizes(config.device, max(1, len(gpus)), timed=timed_slots)
        self._slots = judge_slots(config.device, sizes, gpus)
        self.config = config
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="cuda_gym_judge")
        self._bound = _Bounded(max_pending or 4 * workers)
        self._local = threading.local()

    def _judge(self) -> Judge:
        judge = getattr(self._local, "judge", None)
        if judge is None:
            judge = self._local.judge = Judge(self.config)
        return judge

    def _run(self, task: Task, files: dict[str, bytes], timing: bool, profile: bool) -> Verdict:
        # The slot is held from the build's end: builds are bounded by the CPU's build slots.
        device_slot = functools.partial(self._slots.hold, timed=timing)
        return judge_files(self._judge(), task, files, timing, profile, device_slot)

    def submit(
        self,
        task: Task,
        files: dict[str, bytes],
        *,
        timing: bool = True,
        profile: bool = False,
        wait_s: float | None = None,
    ) -> Future:
        """Queue a judgement; blocks (at most `wait_s`) while the queue is full."""
        self._bound.acquire(wait_s)
        try:
            future = self._pool.submit(self._run, task, dict(files), timing, profile)
        except BaseException:
            self._bound.release()
            raise
        future.add_done_callback(self._bound.release)
        return future

    def evaluate(self, task: Task, files: dict[str, bytes], **kw) -> Verdict:
        """Judge and wait for the verdict."""
        return self.submit(task, files, **kw).result()

    def close(self) -> None:
        """Finish queued judgements (and the baselines they started timing); stop the threads."""
        self._bound._closed = True
        self._pool.shutdown(wait=True)
        wait_for_background_work()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RayJudgeService:
    """Judge actors on a Ray cluster (or a local Ray instance started here)."""

    def __init__(
        self,
        config: JudgeConfig,
        workers: int = 1,
        max_pending: int | None = None,
        ray_address: str | None = None,
    ):
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("the ray backend needs Ray: pip install 'cuda-gym[dist]'") from exc
        if workers < 1:
            raise ConfigError(f"workers must be at least 1, got {workers}")
        self._ray = ray
        if not ray.is_initialized():
            ray.init(address=ray_address, include_dashboard=False, log_to_driver=False)
        self.config = config
        self.workers = workers
        actor_cls = ray.remote(_JudgeActor)
        # A judgement is a pure function of its inputs, so a job caught by an actor's restart is
        # simply run again (twice at most).
        resources = {"num_gpus": 1, "num_cpus": 1} if config.device == "cuda" else {"num_cpus": 1}
        self._actors = [
            actor_cls.options(max_restarts=-1, max_task_retries=2, **resources).remote(config)
            for _ in range(workers)
        ]
        self._load = [0] * workers
        self._lock = threading.Lock()
        self._bound = _Bounded(max_pending or 4 * workers)

    def submit(
        self,
        task: Task,
        files: dict[str, bytes],
        *,
        timing: bool = True,
        profile: bool = False,
        wait_s: float | None = None,
    ) -> Future:
        """Queue a judgement on the least-loaded actor; blocks while the queue is full."""
        self._bound.acquire(wait_s)
        with self._lock:
            index = min(range(self.workers), key=self._load.__getitem__)
            self._load[index] += 1
        ref = self._actors[index].evaluate.remote(task, dict(files), timing, profile)
        raw = ref.future()
        future: Future = Future()

        def done(f: Future) -> None:
            with self._lock:
                self._load[index] -= 1
            self._bound.release()
            try:
                error = f.exception()
                if error is None:
                    future.set_result(Verdict.from_dict(f.result()))
                elif isinstance(error, self._ray.exceptions.RayActorError):
                    future.set_exception(WorkerError(f"the judge worker died: {error}"))
                else:
                    future.set_exception(error)
            except BaseException as exc:  # never leave the caller's future unresolved
                if not future.done():
                    future.set_exception(exc)

        raw.add_done_callback(done)
        return future

    def evaluate(self, task: Task, files: dict[str, bytes], **kw) -> Verdict:
        """Judge and wait for the verdict."""
        return self.submit(task, files, **kw).result()

    def actors(self) -> list:
        """The Ray actor handles (for health checks and tests)."""
        return list(self._actors)

    def close(self) -> None:
        """Stop the actors (the Ray instance stays for its owner)."""
        self._bound._closed = True
        for actor in self._actors:
            self._ray.kill(actor, no_restart=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _JudgeActor:
    """Ray actor body: one Judge, judging one solution at a time."""

    def __init__(self, config: JudgeConfig) -> None:
        self.judge = Judge(config)

    def evaluate(self, task: Task, files: dict[str, bytes], timing: bool, profile: bool) -> dict:
        return judge_files(self.judge, task, files, timing, profile).to_dict()

    def pid(self) -> int:
        return os.getpid()


def make_service(
    backend: str = "local",
    config: JudgeConfig | None = None,
    workers: int = 1,
    max_pending: int | None = None,
    **kw,
) -> LocalJudgeService | RayJudgeService:
    """A judge service: backend "local" (threads here) or "ray" (actors on a Ray cluster).

    `kw` goes to the backend's class (`timed_slots` for "local"; see RayJudgeService for "ray").
    """
    config = config or JudgeConfig()
    if backend == "local":
        return LocalJudgeService(config, workers, max_pending, **kw)
    if backend == "ray":
        return RayJudgeService(config, workers, max_pending, **kw)
    raise ConfigError(f"backend must be one of {BACKENDS}, got {backend!r}")
