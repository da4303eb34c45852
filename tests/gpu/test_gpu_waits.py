"""How judge processes wait for the GPU: asleep outside timed calls, spinning in them (CUDA).
Run with: python -m pytest -m gpu"""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

# Waits of about 0.5 s of GEMMs each way; the CPU time of the main thread's waits against wall.
CHILD = r"""
import ctypes, json, sys, time
mode = sys.argv[1]
if mode == "worker":
    from cuda_gym.judge.roles import sleep_on_gpu_waits
    set_ok = sleep_on_gpu_waits("cuda")
import torch
from cuda_gym.judge.runner import _GpuWaits

a = torch.randn(4096, 4096, device="cuda")
cuda = ctypes.CDLL("libcuda.so.1")


def flags():
    got = ctypes.c_uint(0)
    assert cuda.cuCtxGetFlags(ctypes.byref(got)) == 0
    return got.value & 0x7


def wait_cpu_share():
    a @ a
    torch.cuda.synchronize()
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(8):
        for _ in range(40):
            a @ a
        torch.cuda.synchronize()
    return (time.thread_time() - c0) / (time.perf_counter() - t0)


out = {}
if mode == "worker":
    out["set"] = set_ok
    out["flags"] = flags()
    out["share"] = wait_cpu_share()
else:
    waits = _GpuWaits()
    out["default_flags"] = flags()
    out["default_share"] = wait_cpu_share()
    waits.sleep()
    out["sleep_flags"], out["sleep_share"] = flags(), wait_cpu_share()
    waits.spin()
    out["spin_flags"], out["spin_share"] = flags(), wait_cpu_share()
    waits.sleep()
    out["again_flags"], out["again_share"] = flags(), wait_cpu_share()
    out["unavailable"] = waits.unavailable
print(json.dumps(out))
"""


def _run(mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_worker_context_is_made_to_sleep_in_its_waits():
    out = _run("worker")
    assert out["set"] is True
    assert out["flags"] == 0x4  # CU_CTX_SCHED_BLOCKING_SYNC, from the context's creation
    assert out["share"] < 0.3, out  # a spinning wait would hold the core (~1.0)


def test_a_runner_sleeps_between_timed_calls_and_spins_in_them():
    out = _run("runner")
    assert out["unavailable"] is False
    assert out["default_share"] > 0.7, out  # PyTorch's context spins by default
    assert (out["sleep_flags"], out["spin_flags"], out["again_flags"]) == (0x4, 0x1, 0x4)
    assert out["sleep_share"] < 0.3 and out["again_share"] < 0.3, out
    assert out["spin_share"] > 0.7, out
