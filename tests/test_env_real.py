"""Whole episodes of CudaKernel-v0 with the real judge on the CPU device (C++ kernels built)."""

import dataclasses

import gymnasium as gym
import pytest

from cuda_gym.demo import CPU_KERNEL, MODEL_NEW
from tests.conftest import TEST_JUDGE
from tests.solutions import BAD_CPU_KERNELS, COMPILE_ERROR_KERNEL, TASK_ID, model_new_calling

pytestmark = pytest.mark.slow


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


def make_env(**kwargs):
    kwargs.setdefault("judge", TEST_JUDGE)
    kwargs.setdefault("task", TASK_ID)
    return gym.make("CudaKernel-v0", device="cpu", **kwargs)


def write_solution(env, kernel=CPU_KERNEL, model_new=MODEL_NEW, name="kernels/gated.cpp"):
    env.step(
        [
            call("write_file", path=name, content=kernel),
            call("write_file", path="model_new.py", content=model_new),
        ]
    )


def test_full_episode_with_a_correct_kernel_earns_a_reward():
    env = make_env()
    env.reset(seed=0)
    write_solution(env)
    obs, reward, terminated, truncated, info = env.step(call("compile"))
    assert "Build OK" in obs and reward == 0 and not terminated
    obs, reward, *_, info = env.step(call("run"))
    assert obs.startswith("PASS") and info["tool_results"][0]["correct"] is True
    obs, reward, *_, info = env.step(call("profile"))
    assert "speedup" in obs and "Milestone reward" in obs
    obs, reward, terminated, truncated, info = env.step(call("submit"))
    assert terminated and not truncated and info["stop_reason"] == "submit"
    assert reward >= 1 and info["reward_components"]["correct"] is True
    env.close()


def test_wrong_crashing_and_broken_kernels_are_observations():
    env = make_env()
    env.reset(seed=0)
    env.step(call("write_file", path="kernels/broken.cpp", content=COMPILE_ERROR_KERNEL))
    obs, *_, info = env.step(call("compile"))
    assert "Build FAILED" in obs and "undeclared_variable" in obs and "kernels/broken.cpp" in obs
    env.step(call("write_file", path="kernels/broken.cpp", content="// fixed\n"))
    write_solution(env, BAD_CPU_KERNELS, model_new_calling("crash"), "kernels/bad.cpp")
    obs, *_ = env.step(call("run"))
    assert obs.startswith("FAIL") and "SIGSEGV" in obs
    env.step(call("write_file", path="model_new.py", content=model_new_calling("wrong")))
    obs, reward, terminated, _, info = env.step(call("submit"))
    assert terminated and reward == -1 and "do not match" in obs
    env.close()


def test_a_hanging_kernel_times_out():
    judge = dataclasses.replace(TEST_JUDGE, run_timeout_s=10)
    env = make_env(judge=judge)
    env.reset(seed=0)
    write_solution(env, BAD_CPU_KERNELS, model_new_calling("spin"), "kernels/bad.cpp")
    obs, *_ = env.step(call("run"))
    assert obs.startswith("FAIL") and "timed out" in obs
    env.close()
