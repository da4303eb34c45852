"""The judge and whole episodes on a real CUDA GPU. Run with: python -m pytest -m gpu"""

import json
import subprocess
import sys

import pytest

from cuda_gym.demo import run_demo
from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.judge.device import resolve_device
from cuda_gym.tasks import builtin_task
from tests.solutions import (
    TASK_ID,
    write_cuda_bad_solution,
    write_kernel_only_solution,
    write_solution,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def judge():
    return Judge(JudgeConfig(device="cuda", run_timeout_s=120))


@pytest.fixture(scope="module")
def task():
    return builtin_task(TASK_ID).for_device("cuda")


def test_auto_device_picks_the_gpu():
    assert resolve_device("auto") == "cuda"


def test_correct_cuda_kernel_is_accepted_and_timed(judge, task, tmp_path):
    verdict = judge.evaluate(task, write_solution(tmp_path, "cuda", "correct"), profile=True)
    assert verdict.compiled and verdict.correct, verdict.error
    assert verdict.reward >= 1 and verdict.trials == 5
    assert verdict.time_ms["candidate"] > 0 and verdict.time_ms["eager"] > 0
    assert verdict.time_ms["compile"] > 0
    assert "gated_multiply_vec4" in verdict.profile_table
    for role in ("candidate",):  # the trusted driver (reference, buffers); not its runner
        peak = verdict.flags["device_peak_bytes"][role]
        assert peak["reserved"] >= peak["allocated"] > 0, peak
    keys = (
        "time_ms",
        "speedup_vs_eager",
        "speedup_vs_compile",
        "reward",
        "stage_times_s",
        "duration_s",
    )
    print(json.dumps({k: verdict.to_dict()[k] for k in keys}))


def test_wrong_cuda_kernel_is_rejected(judge, task, tmp_path):
    verdict = judge.evaluate(task, write_cuda_bad_solution(tmp_path, "wrong"), timing=False)
    assert verdict.compiled and not verdict.correct and verdict.reward == -1


def test_illegal_address_is_an_error_and_the_next_judgement_works(judge, task, tmp_path):
    verdict = judge.evaluate(task, write_cuda_bad_solution(tmp_path / "a", "crash"), timing=False)
    assert not verdict.correct and verdict.reward == -1
    assert "illegal" in verdict.error.lower()
    again = judge.evaluate(task, write_solution(tmp_path / "b", "cuda", "correct"), timing=False)
    assert again.correct


def test_hanging_kernel_is_killed(task, tmp_path):
    quick = Judge(JudgeConfig(device="cuda", run_timeout_s=20))
    verdict = quick.evaluate(task, write_cuda_bad_solution(tmp_path, "spin"), timing=False)
    assert not verdict.correct and "timed out" in verdict.error


def test_cuda_compile_error_is_reported(judge, tmp_path):
    (tmp_path / "kernels").mkdir()
    # A kernel-only workspace (an extern "C" launcher) goes to nvcc, whose error is reported.
    (tmp_path / "kernels" / "k.cu").write_text(
        "__global__ void k() { undefined_thing(); }\n"
        'extern "C" void launch_k() { k<<<1, 1>>>(); }\n'
    )
    build = judge.build(tmp_path)
    assert not build.ok and "undefined_thing" in build.errors and "kernels/k.cu" in build.errors


def test_demo_episode_on_the_gpu():
    result = run_demo(device="cuda")
    assert result.reward >= 1 and result.correct and result.stop_reason == "submit"
    print(json.dumps(result.summary()))


def test_cli_demo_json_on_the_gpu():
    out = subprocess.run(
        [sys.executable, "-m", "cuda_gym.cli", "demo", "--device", "cuda", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["reward"] >= 1 and result["device"] == "cuda"


def test_kernel_only_cuda_workspace_builds_fast_and_is_accepted(judge, task, tmp_path):
    verdict = judge.evaluate(task, write_kernel_only_solution(tmp_path, "cuda"), profile=True)
    assert verdict.compiled and verdict.correct, verdict.error
    assert verdict.violations == [] and verdict.time_ms["candidate"] > 0
    assert "gated_kernel" in verdict.profile_table
    print(json.dumps({"build_s": verdict.stage_times_s["build"], "time_ms": verdict.time_ms}))
