"""The judge service: the same tests for the local thread pool and for Ray actors."""

import threading
import time

import pytest

from cuda_gym.demo import CPU_KERNEL, DEMO_TASK, MODEL_NEW
from cuda_gym.errors import ConfigError
from cuda_gym.judge import JudgeConfig
from cuda_gym.service import make_service, solution_files
from cuda_gym.tasks import builtin_task
from tests.test_stress import BAD_MODEL_NEW, EXPLOITS_CPP, SANDBOX_ATTACKS_CPP

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CONFIG = JudgeConfig(
    device="cpu",
    timed_runs=2,
    warmup_runs=0,
    correctness_trials=2,
    baselines=("eager",),
    run_timeout_s=30,  # a hang costs this; correct runs need headroom on a loaded 2-core machine
)
GOOD = {"model_new.py": MODEL_NEW.encode(), "kernels/gated.cpp": CPU_KERNEL.encode()}
CRASH = {
    "model_new.py": BAD_MODEL_NEW.format(name="underscore_exit").encode(),
    "kernels/exploits.cpp": EXPLOITS_CPP.read_bytes(),
    "kernels/sandbox_attacks.cpp": SANDBOX_ATTACKS_CPP.read_bytes(),
}
HANG = {
    "model_new.py": BAD_MODEL_NEW.format(name="hang").encode(),
    "kernels/exploits.cpp": EXPLOITS_CPP.read_bytes(),
    "kernels/sandbox_attacks.cpp": SANDBOX_ATTACKS_CPP.read_bytes(),
}


@pytest.fixture(scope="module")
def task():
    return builtin_task(DEMO_TASK).for_device("cpu")


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module", params=["local", "ray"])
def service(request, task):
    if request.param == "ray":
        request.getfixturevalue("ray_instance")
    svc = make_service(request.param, CONFIG, workers=2, max_pending=3)
    yield svc
    svc.close()


def test_good_and_crashing_solutions_judged_concurrently(service, task):
    futures = [service.submit(task, files) for files in (GOOD, CRASH, GOOD)]
    verdicts = [f.result(timeout=600) for f in futures]
    assert [v.verdict for v in verdicts] == ["accept", "reject", "accept"]
    assert "process" in verdicts[1].error and verdicts[0].time_ms["candidate"] > 0


def test_back_pressure_blocks_a_full_queue(service, task):
    running = [service.submit(task, GOOD, timing=False) for _ in range(3)]
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        service.submit(task, GOOD, wait_s=0.2)
    assert time.monotonic() - start < 5
    verdicts = [f.result(timeout=600) for f in running]
    assert all(v.correct for v in verdicts), [v.error for v in verdicts]
    assert service.evaluate(task, GOOD, timing=False).correct  # room again


def test_a_hang_is_a_verdict_and_the_service_carries_on(service, task):
    hang = service.evaluate(task, HANG, timing=False)
    assert hang.verdict == "reject" and "timed out" in hang.error
    assert service.evaluate(task, GOOD, timing=False).correct


def test_submissions_from_many_threads(service, task):
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(service.evaluate(task, GOOD, timing=False)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(v.correct for v in results)


def test_paths_leaving_the_solution_are_refused(task):
    with make_service("local", CONFIG) as svc:
        with pytest.raises(ValueError, match="leaves the solution directory"):
            svc.evaluate(task, {"../evil.py": b"x"})


def test_a_killed_ray_worker_is_restarted(ray_instance, task):
    with make_service("ray", CONFIG, workers=1) as svc:
        (actor,) = svc.actors()
        first = ray_instance.get(actor.pid.remote())
        ray_instance.kill(actor, no_restart=False)
        assert svc.evaluate(task, GOOD, timing=False).correct
        assert ray_instance.get(actor.pid.remote()) != first


def test_unknown_backend_and_solution_files(tmp_path):
    with pytest.raises(ConfigError, match="backend"):
        make_service("slurm", CONFIG)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "model_new.py").write_text("x = 1\n")
    (tmp_path / "kernels" / "a.cpp").write_text("int a;\n")
    assert solution_files(tmp_path) == {"model_new.py": b"x = 1\n", "kernels/a.cpp": b"int a;\n"}


def test_timed_slots_replace_the_default():
    with make_service("local", CONFIG, timed_slots=3) as svc:
        assert svc._slots.sizes.timed == 3
    with pytest.raises(ConfigError, match="at least 1"):
        make_service("local", CONFIG, timed_slots=0)
