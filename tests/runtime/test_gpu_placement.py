"""Judge slots place calls on GPUs; the judge's workers see only the GPU of their slot."""

import os
import threading

import cuda_gym.judge.judge as judge_module
from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.judge.device import DeviceInfo
from cuda_gym.runtime.process import ProcessResult
from cuda_gym.runtime.slots import JudgeSlots, SlotSizes, current_gpu, use_gpu, visible_gpus


def test_timed_calls_get_their_own_gpu_and_untimed_calls_avoid_timed_gpus():
    slots = JudgeSlots(SlotSizes(timed=2, untimed=4), gpus=("0", "1"))
    inside = threading.Barrier(3)
    release = threading.Event()
    seen = []

    def timed_call():
        with slots.hold(timed=True):
            seen.append(current_gpu())
            inside.wait()
            release.wait(10)

    threads = [threading.Thread(target=timed_call) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    assert sorted(seen) == ["0", "1"]
    assert slots.stats()["calls_per_gpu"] == {"0": 1, "1": 1}
    release.set()
    for t in threads:
        t.join()
    assert current_gpu() is None

    with slots.hold(timed=True):
        timed_gpu = current_gpu()
        with slots.hold(timed=False):
            assert current_gpu() != timed_gpu  # the untimed call does not disturb the timing
        assert current_gpu() == timed_gpu


def test_without_gpus_there_is_no_placement():
    slots = JudgeSlots(SlotSizes(timed=1, untimed=1))
    with slots.hold(timed=True):
        assert current_gpu() is None


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpus(2) == ("0", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, GPU-abc")
    assert visible_gpus(2) == ("3", "GPU-abc")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus(1) == ()


def test_the_judge_starts_its_workers_on_the_slot_gpu(monkeypatch, tmp_path):
    fake = DeviceInfo("cuda", "Fake GPU", "9.0", "2.x", "13.0")
    monkeypatch.setattr(judge_module, "device_info", lambda device: fake)
    envs = []

    def fake_run(argv, *, timeout_s, cwd=None, env=None, stdin_data=None, **kw):
        envs.append(dict(env))
        return ProcessResult(1, "", "no worker here", False, 0.0)

    monkeypatch.setattr(judge_module, "run_process", fake_run)
    judge = Judge(JudgeConfig(device="cuda", cache_dir=tmp_path / "cache"))
    with use_gpu("1"):
        judge._run_worker("candidate", tmp_path, {}, timeout_s=1.0)
    judge._run_worker("candidate", tmp_path, {}, timeout_s=1.0)
    assert envs[0]["CUDA_VISIBLE_DEVICES"] == "1"
    assert envs[1].get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")
