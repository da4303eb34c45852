"""The zygote launcher: same contract as run_process, failures contained, fallback when broken."""

import os
import signal
import threading
import time

import pytest

from cuda_gym.runtime import python_child_env, zygote
from cuda_gym.runtime.process import Pause
from cuda_gym.runtime.zygote import ZygoteLauncher

CHILD = "tests.runtime.zygote_child"


@pytest.fixture(scope="module")
def launcher():
    launcher = ZygoteLauncher(python_child_env())
    yield launcher
    launcher.close()


def _run(launcher, action, tmp_path, timeout_s=30.0, **kw):
    env = dict(python_child_env(), ZYGOTE_TEST_X="42")
    return launcher.run(CHILD, [action], timeout_s=timeout_s, cwd=tmp_path, env=env, **kw)


def test_stdin_cwd_env_and_streams_reach_the_worker(launcher, tmp_path):
    proc = _run(launcher, "echo", tmp_path, stdin_data=b"hello")
    assert proc.ok, proc.stderr
    assert proc.stdout.strip() == f"stdin=hello cwd={tmp_path} x=42"
    assert proc.stderr.strip() == "to stderr"


def test_exit_status_signal_and_exception(launcher, tmp_path):
    assert _run(launcher, "exit3", tmp_path).returncode == 3
    segv = _run(launcher, "segv", tmp_path)
    assert segv.returncode == -signal.SIGSEGV and segv.signal_name == "SIGSEGV"
    raised = _run(launcher, "raise", tmp_path)
    assert raised.returncode == 1 and "boom from the worker" in raised.stderr


def test_timeout_kills_the_group_and_the_next_run_works(launcher, tmp_path):
    start = time.monotonic()
    proc = _run(launcher, "sleep", tmp_path, timeout_s=1.0)
    assert proc.timed_out and not proc.ok and time.monotonic() - start < 10
    assert _run(launcher, "echo", tmp_path, stdin_data=b"again").ok


def test_a_paused_clock_is_extended_and_bounded(launcher, tmp_path):
    paused = Pause(lambda: True, max_s=10)
    assert _run(launcher, "nap", tmp_path, timeout_s=1.0, pause=paused).ok
    assert 0.5 < paused.used_s < 2.5
    bounded = Pause(lambda: True, max_s=0.3)
    assert _run(launcher, "nap", tmp_path, timeout_s=1.0, pause=bounded).timed_out


def test_grandchildren_are_killed_with_the_worker(launcher, tmp_path):
    proc = _run(launcher, "grandchild", tmp_path)
    assert proc.ok
    pid = int(proc.stdout.split()[0])
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the worker's grandchild outlived it")


def test_concurrent_runs_from_threads(launcher, tmp_path):
    results = []

    def one(i):
        work = tmp_path / str(i)
        work.mkdir()
        results.append(_run(launcher, "echo", work, stdin_data=str(i).encode()))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(r.ok for r in results)
    assert sorted(r.stdout.split()[0] for r in results) == [f"stdin={i}" for i in range(8)]


def test_a_preloaded_zygote_runs_torch_in_its_children(tmp_path):
    warm = ZygoteLauncher(python_child_env(), preload="cuda_gym.judge.worker:preload")
    try:
        proc = _run(warm, "torch", tmp_path)
        assert proc.ok, proc.stderr
        assert float(proc.stdout) == 999000.0
    finally:
        warm.close()


def test_a_dead_zygote_is_restarted(launcher, tmp_path):
    assert _run(launcher, "echo", tmp_path).ok
    os.killpg(launcher._proc.pid, signal.SIGKILL)
    time.sleep(0.5)
    assert _run(launcher, "echo", tmp_path, stdin_data=b"after").stdout.startswith("stdin=after")


def test_a_zygote_that_cannot_start_falls_back_to_plain_processes(tmp_path):
    broken = ZygoteLauncher(python_child_env(), preload="no_such_module:nothing")
    proc = _run(broken, "echo", tmp_path, stdin_data=b"slow way")
    assert proc.ok and proc.stdout.startswith("stdin=slow way")
    assert broken._broken


def test_a_disabled_zygote_starts_processes_the_slow_way(tmp_path):
    own = ZygoteLauncher(python_child_env())
    try:
        forked = _run(own, "ppid", tmp_path)
        assert forked.ok and int(forked.stdout) == own._proc.pid
        own.disable("disabled by the test")
        assert zygote.zygote_failures()[-1] == "disabled: disabled by the test"
        slow = _run(own, "ppid", tmp_path)
        assert slow.ok and int(slow.stdout) == os.getpid()
        assert own._proc is None and own._broken
    finally:
        own.close()


def test_a_zygote_whose_preload_initialised_cuda_refuses_to_serve(tmp_path):
    refused = ZygoteLauncher(
        python_child_env(), preload="tests.runtime.zygote_preloads:pretend_cuda_initialised"
    )
    proc = _run(refused, "ppid", tmp_path)
    assert proc.ok and int(proc.stdout) == os.getpid()  # started the slow way
    assert refused._broken
    refused._log.seek(0)
    assert b"initialised CUDA" in refused._log.read()
    assert "initialised CUDA" in zygote.zygote_failures()[-1]


class _FakeDriver:
    def __init__(self, code):
        self.code = code

    def cuCtxGetCurrent(self, pointer):  # noqa: N802 - the driver's name
        return self.code


@pytest.mark.parametrize(
    ("loaded", "code", "expected"), [(False, 0, False), (True, 3, False), (True, 0, True)]
)
def test_driver_initialised_asks_the_loaded_driver_only(monkeypatch, loaded, code, expected):
    import ctypes

    def cdll(name, mode=0):
        assert mode & os.RTLD_NOLOAD  # never loads the driver itself
        if not loaded:
            raise OSError("not loaded")
        return _FakeDriver(code)

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    assert zygote.driver_initialised() is expected


class _FakeNvml:
    def __init__(self, initialisations):
        self.count = initialisations

    def nvmlShutdown(self):  # noqa: N802 - NVML's name
        if self.count == 0:
            return 1  # NVML_ERROR_UNINITIALIZED
        self.count -= 1
        return 0


@pytest.mark.parametrize(("loaded", "initialisations"), [(False, 0), (True, 0), (True, 3)])
def test_shut_nvml_down_undoes_every_initialisation(monkeypatch, loaded, initialisations):
    import ctypes

    nvml = _FakeNvml(initialisations)

    def cdll(name, mode=0):
        assert name == "libnvidia-ml.so.1" and mode & os.RTLD_NOLOAD  # never loads NVML
        if not loaded:
            raise OSError("not loaded")
        return nvml

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    assert zygote.shut_nvml_down() == initialisations
    assert nvml.count == 0


def test_driver_initialised_is_false_in_a_process_without_cuda():
    assert zygote.driver_initialised() is False


def test_the_worker_preload_names_the_import_that_initialised_cuda(monkeypatch):
    from cuda_gym.judge import worker

    answers = iter([False, False, True])
    monkeypatch.setattr(zygote, "driver_initialised", lambda: next(answers))
    with pytest.raises(RuntimeError, match=f"importing {worker.PRELOAD_MODULES[2]} initialised"):
        worker.preload()
