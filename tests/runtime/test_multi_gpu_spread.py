"""Judgements spread over several GPUs: 32 concurrent calls through the service on 4 fake GPUs.

The service places every judgement with the process-wide judge slots (`runtime/slots.py`); a fake
judge function stands in for the real one and records `current_gpu()` (the GPU the judge's
workers would get in CUDA_VISIBLE_DEVICES). A barrier of as many calls as there are slots makes
each round fill every slot before any call ends, so the spread is exact. (Timed judgements share
a GPU; their timings take turns at the device's gate, which is not exercised here.)
"""

import threading
from collections import Counter

import cuda_gym.service as service_module
from cuda_gym.judge import JudgeConfig
from cuda_gym.runtime.slots import TIMED_SLOTS_PER_GPU, UNTIMED_SLOTS_PER_GPU, current_gpu
from cuda_gym.service import make_service
from cuda_gym.tasks import builtin_task

FAKE_GPUS = ("0", "1", "2", "3")
CALLS = 32


class Recorder:
    """A fake judge function: records each call's GPU and the calls running per GPU."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=30)
        self.lock = threading.Lock()
        self.running = Counter()
        self.timed_running = Counter()
        self.max_timed_on_gpu = Counter()
        self.max_running_on_gpu = Counter()
        self.calls = Counter()

    def __call__(self, judge, task, files, timing, profile, device_slot):
        with device_slot():
            return self._judge(timing)

    def _judge(self, timing):
        gpu = current_gpu()
        with self.lock:
            self.calls[gpu] += 1
            self.running[gpu] += 1
            self.timed_running[gpu] += int(timing)
            self.max_running_on_gpu[gpu] = max(self.max_running_on_gpu[gpu], self.running[gpu])
            self.max_timed_on_gpu[gpu] = max(self.max_timed_on_gpu[gpu], self.timed_running[gpu])
        try:
            self.barrier.wait()  # every slot of this round is taken before anyone leaves
        finally:
            with self.lock:
                self.running[gpu] -= 1
                self.timed_running[gpu] -= int(timing)
        return gpu


def judge_all(monkeypatch, recorder: Recorder, timing: bool) -> list:
    """CALLS judgements at once through a local service that sees FAKE_GPUS; their GPUs."""
    monkeypatch.setattr(service_module, "judge_gpus", lambda device: FAKE_GPUS)
    monkeypatch.setattr(service_module, "Judge", lambda config: object())
    monkeypatch.setattr(service_module, "judge_files", recorder)
    task = builtin_task("weighted_row_sum")
    with make_service("local", JudgeConfig(device="cuda"), workers=CALLS) as service:
        futures = [service.submit(task, {}, timing=timing) for _ in range(CALLS)]
        return [f.result(timeout=60) for f in futures]


def test_timed_judgements_spread_evenly(monkeypatch):
    recorder = Recorder(parties=TIMED_SLOTS_PER_GPU * len(FAKE_GPUS))
    gpus = judge_all(monkeypatch, recorder, timing=True)
    assert sorted(set(gpus)) == list(FAKE_GPUS)
    assert set(recorder.max_timed_on_gpu.values()) == {TIMED_SLOTS_PER_GPU}
    assert recorder.calls == Counter(dict.fromkeys(FAKE_GPUS, CALLS // len(FAKE_GPUS)))


def test_untimed_judgements_spread_evenly(monkeypatch):
    recorder = Recorder(parties=UNTIMED_SLOTS_PER_GPU * len(FAKE_GPUS))
    judge_all(monkeypatch, recorder, timing=False)
    assert recorder.calls == Counter(dict.fromkeys(FAKE_GPUS, CALLS // len(FAKE_GPUS)))
    assert set(recorder.max_running_on_gpu.values()) == {UNTIMED_SLOTS_PER_GPU}
    assert sum(recorder.max_timed_on_gpu.values()) == 0
