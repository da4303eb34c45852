"""The judge on the CPU device, for real: builds, runs and times C++ kernels."""

import dataclasses

import pytest

from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.tasks import builtin_task
from tests.conftest import TEST_JUDGE
from tests.solutions import TASK_ID, write_solution

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def judge():
    # With the CPU's default of timing eager again after every candidate.
    return Judge(dataclasses.replace(TEST_JUDGE, retime_baselines=None))


@pytest.fixture(scope="module")
def task():
    return builtin_task(TASK_ID).for_device("cpu")


def test_correct_kernel_is_accepted_with_timings(judge, task, tmp_path):
    verdict = judge.evaluate(task, write_solution(tmp_path, "cpu", "correct"), profile=True)
    assert verdict.compiled and verdict.correct and verdict.verdict == "accept"
    assert verdict.reward >= 1
    assert verdict.trials == 5
    assert verdict.max_rel_error < 1e-5  # relative: wide-range inputs make absolute errors large
    assert verdict.time_ms["candidate"] > 0 and verdict.time_ms["eager"] > 0
    assert verdict.time_ms["compile"] > 0
    assert verdict.speedup_vs_eager == pytest.approx(
        verdict.time_ms["eager"] / verdict.time_ms["candidate"]
    )
    assert "ModelNew.forward" in verdict.profile_table
    assert "candidate.profile" in verdict.stage_times_s
    # The first call's own time, part of "run" (what FIRST_CALL_EXTRA_S must cover).
    first = verdict.stage_times_s["candidate.run.first_call"]
    assert 0 < first <= verdict.stage_times_s["candidate.run"]
    # Timed by the trusted driver: random calls re-checked, the round trip subtracted.
    timing = verdict.flags["candidate_timing"]
    assert timing["rechecked_calls"] >= 2 and timing["round_trip_ms"] > 0
    # No GPU memory was used, so no peak is reported.
    assert "device_peak_bytes" not in verdict.flags
    # The host CPU each worker role spent, its runners included (a runner imports torch).
    cpu = verdict.flags["worker_cpu_s"]
    assert cpu["candidate"] > 0.5
    # ... and by stage, which add up to about the same.
    by_stage = sum(s for role, s in cpu.items() if role.startswith("candidate."))
    assert cpu["candidate.load"] > 0 and abs(by_stage - cpu["candidate"]) < 0.2 * cpu["candidate"]
    # On the CPU, eager is timed again right after the candidate; its time makes the speedup.
    again = verdict.flags["baselines_retimed"]
    assert list(again) == ["eager"] and again["eager"]["now_ms"] == verdict.time_ms["eager"] > 0
    assert again["eager"]["cached_ms"] > 0
    assert set(verdict.flags["timing_noise"]) == {"eager", "compile"}


def test_wrong_kernel_is_rejected(judge, task, tmp_path):
    verdict = judge.evaluate(task, write_solution(tmp_path, "cpu", "wrong"), timing=False)
    assert verdict.compiled and not verdict.correct
    assert verdict.reward == -1 and verdict.verdict == "reject"
    assert "values outside" in verdict.error


def test_compile_error_reports_the_first_compiler_error(judge, task, tmp_path):
    verdict = judge.evaluate(task, write_solution(tmp_path, "cpu", "compile_error"))
    assert not verdict.compiled and verdict.stage == "build" and verdict.reward == -1
    assert "undeclared_variable" in verdict.error
    assert "kernels/broken.cpp" in verdict.error


def test_segfaulting_kernel_is_an_error_not_a_crash(judge, task, tmp_path):
    verdict = judge.evaluate(task, write_solution(tmp_path, "cpu", "crash"), timing=False)
    assert not verdict.correct and verdict.reward == -1
    assert "SIGSEGV" in verdict.error


def test_hanging_kernel_is_killed_at_the_timeout(task, tmp_path):
    quick = Judge(JudgeConfig(device="cpu", run_timeout_s=8))
    verdict = quick.evaluate(task, write_solution(tmp_path, "cpu", "spin"), timing=False)
    assert not verdict.correct and verdict.reward == -1
    assert "timed out" in verdict.error
    # Killed by its 8 s limit, not the default 120 s: the run stage's own time says so (the
    # whole judgement's, builds and probe included, stretches on a loaded machine: 66 s once,
    # 148 s beside a false-rejection run and other slow tests, with its run stage at 5.3 s).
    assert verdict.stage_times_s["candidate.run"] < 30


def test_missing_model_new_class(judge, task, tmp_path):
    (tmp_path / "model_new.py").write_text("import torch\n")
    verdict = judge.evaluate(task, tmp_path, timing=False)
    assert verdict.reward == -1 and "defines no class ModelNew" in verdict.error


def test_syntax_error_in_model_new(judge, task, tmp_path):
    (tmp_path / "model_new.py").write_text("class ModelNew(:\n")
    verdict = judge.evaluate(task, tmp_path, timing=False)
    assert verdict.stage == "static" and "syntax error" in verdict.error


def test_identical_sources_reuse_the_cached_build(judge, tmp_path):
    first = judge.build(write_solution(tmp_path / "a", "cpu", "correct"))
    second = judge.build(write_solution(tmp_path / "b", "cpu", "correct"))
    assert first.ok and second.ok and second.cached
    assert first.module_dir == second.module_dir


def test_cuda_sources_are_refused_on_the_cpu_device(judge, tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.cu").write_text("__global__ void k() {}\n")
    build = judge.build(tmp_path)
    assert not build.ok and "builds C++ only" in build.errors
