"""The judge's disk caches: one process computes a missing probe while others wait."""

import subprocess
import sys
import time

from cuda_gym.judge.baselines import JsonCache, baseline_key
from cuda_gym.judge.config import JudgeConfig
from cuda_gym.judge.device import DeviceInfo

WAITER = """
import sys
from cuda_gym.judge.baselines import JsonCache
cache = JsonCache(sys.argv[1], "probes")
print("waiting", flush=True)
with cache.lock("k"):
    print("acquired", cache.get("k"), flush=True)
"""


def test_the_lock_excludes_other_processes(tmp_path):
    cache = JsonCache(tmp_path, "probes")
    with cache.lock("k"):
        proc = subprocess.Popen(
            [sys.executable, "-c", WAITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline().strip() == "waiting"
        time.sleep(0.5)
        assert proc.poll() is None  # still blocked on the lock
        cache.put("k", {"probe": 1})
    out, _ = proc.communicate(timeout=60)
    # It got the lock only after the holder had stored the document, and can reuse it.
    assert out.strip() == "acquired {'probe': 1}"


def test_baselines_are_shared_between_tolerance_modes_but_not_timing_settings():
    info = DeviceInfo("cuda", "NVIDIA H200", "9.0", "2.11.0", "13.0", "580.0")
    paper = JudgeConfig(device="cuda", tolerance_mode="paper")
    strict = JudgeConfig(device="cuda", tolerance_mode="strict")
    assert baseline_key("h", info, paper) == baseline_key("h", info, strict)
    more_runs = JudgeConfig(device="cuda", timed_runs=paper.timed_runs + 1)
    assert baseline_key("h", info, more_runs) != baseline_key("h", info, paper)
    other_gpu = DeviceInfo("cuda", "NVIDIA H100", "9.0", "2.11.0", "13.0", "580.0")
    assert baseline_key("h", other_gpu, paper) != baseline_key("h", info, paper)
    assert baseline_key("g", info, paper) != baseline_key("h", info, paper)


def test_sampled_gpu_runners_time_their_baselines_apart(monkeypatch):
    from cuda_gym.judge.config import SAMPLE_CUDA_HOST_ENV

    info = DeviceInfo("cuda", "NVIDIA H200", "9.0", "2.11.0", "13.0", "580.0")
    config = JudgeConfig(device="cuda")
    monkeypatch.setenv(SAMPLE_CUDA_HOST_ENV, "0")
    plain = baseline_key("h", info, config)
    monkeypatch.delenv(SAMPLE_CUDA_HOST_ENV)
    assert baseline_key("h", info, config) != plain  # sampling costs the timed side time
