"""A worker that runs out of memory is run once more alone on its device before any verdict."""

import pytest

from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.tasks import builtin_task
from tests.solutions import write_kernel_only_solution

pytestmark = pytest.mark.slow

OOM = "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB (simulated)"
TASK = builtin_task("sigmoid_gated_multiply").for_device("cpu")


def judge_running_out(tmp_path, monkeypatch, role: str, times: int, **config):
    """A judge whose first `times` runs of `role` fail as out of memory; the runs it made.

    The session's shared cache (task probe and baselines made once per run), except where a
    test names a cache of its own.
    """
    write_kernel_only_solution(tmp_path, "cpu")
    judge = Judge(JudgeConfig(device="cpu", baselines=("eager",), timed_runs=3, **config))
    real = Judge._run_worker
    calls = []

    def out_of_memory(self, r, tmp, request, timeout_s, task=None):
        if request.get("baselines_only"):  # the task's baselines: a driver of their own
            return real(self, r, tmp, request, timeout_s, task)
        calls.append((r, bool(request.get("gate_alone"))))
        if r == role and sum(c == role for c, _ in calls) <= times:
            return {"ok": False, "error": OOM, "stage": "run", "result": {}, "duration_s": 1.0}
        return real(self, r, tmp, request, timeout_s, task)

    monkeypatch.setattr(Judge, "_run_worker", out_of_memory)
    return judge, calls


def test_a_candidate_out_of_memory_once_is_rerun_alone_and_accepted(tmp_path, monkeypatch):
    judge, calls = judge_running_out(tmp_path, monkeypatch, "candidate", 1)
    verdict = judge.evaluate(TASK, tmp_path, timing=True)
    assert verdict.correct and verdict.verdict == "accept", verdict.error
    assert verdict.flags["retried_alone_after_oom"] == ["candidate"]
    assert [c for c in calls if c[0] == "candidate"] == [("candidate", False), ("candidate", True)]


def test_out_of_memory_alone_too_is_the_candidates_failure(tmp_path, monkeypatch):
    judge, calls = judge_running_out(tmp_path, monkeypatch, "candidate", 2)
    verdict = judge.evaluate(TASK, tmp_path, timing=False)
    assert not verdict.correct and "out of memory" in verdict.error
    assert verdict.flags["retried_alone_after_oom"] == ["candidate"]
    assert sum(r == "candidate" for r, _ in calls) == 2
    assert verdict.compiled  # (it ran out in stage "run": built and imported)


def test_without_the_gate_there_is_no_rerun(tmp_path, monkeypatch):
    judge, calls = judge_running_out(tmp_path, monkeypatch, "candidate", 1, device_gate=False)
    verdict = judge.evaluate(TASK, tmp_path, timing=False)
    assert not verdict.correct and "out of memory" in verdict.error
    assert "retried_alone_after_oom" not in verdict.flags


def test_the_probe_is_rerun_alone_too(tmp_path, monkeypatch):
    # A cache of its own: the probe must run, not come from the shared cache.
    judge, calls = judge_running_out(
        tmp_path, monkeypatch, "probe", 1, cache_dir=tmp_path / "cache"
    )
    verdict = judge.evaluate(TASK, tmp_path, timing=False)
    assert verdict.correct, verdict.error
    assert [c for c in calls if c[0] == "probe"] == [("probe", False), ("probe", True)]


def test_a_forked_worker_that_fails_at_start_is_rerun_the_slow_way(tmp_path, monkeypatch):
    """With fast_worker_start, a worker whose device cannot start in the fork (stage "start",
    before any task or candidate code) costs speed, never the verdict: it is rerun as a fresh
    process and the zygote is no longer used."""
    from cuda_gym.judge import judge as judge_module
    from cuda_gym.runtime import zygote

    preload = "tests.runtime.zygote_preloads:break_device_identity"
    monkeypatch.setattr(judge_module, "WORKER_PRELOAD", preload)
    write_kernel_only_solution(tmp_path, "cpu")
    judge = Judge(
        JudgeConfig(
            device="cpu",
            baselines=("eager",),
            timed_runs=3,
            fast_worker_start=True,
        )
    )
    try:
        verdict = judge.evaluate(TASK, tmp_path, timing=True)
        assert verdict.correct and verdict.verdict == "accept", verdict.error
        launchers = [v for k, v in zygote._shared.items() if k[1] == preload]
        assert launchers and launchers[0]._broken
    finally:
        zygote.close_shared_launchers()


def _candidate_says(tmp_path, monkeypatch, memory_short: bool):
    """A judge whose candidate's first run reports running out of memory in its own words;
    the driver found the memory short (`memory_short`) or not. The runs it made."""
    write_kernel_only_solution(tmp_path, "cpu")
    judge = Judge(JudgeConfig(device="cpu", baselines=("eager",), timed_runs=3))
    real = Judge._run_worker
    calls = []

    def says_out_of_memory(self, r, tmp, request, timeout_s, task=None):
        run = real(self, r, tmp, request, timeout_s, task)
        if r == "candidate":
            calls.append(bool(request.get("gate_alone")))
            if len(calls) == 1:
                run["result"].update(candidate_error=OOM, memory_short=memory_short)
        return run

    monkeypatch.setattr(Judge, "_run_worker", says_out_of_memory)
    return judge, calls


def test_a_candidates_word_alone_gets_no_rerun(tmp_path, monkeypatch):
    judge, calls = _candidate_says(tmp_path, monkeypatch, memory_short=False)
    verdict = judge.evaluate(TASK, tmp_path, timing=False)
    assert not verdict.correct and "out of memory" in verdict.error
    assert "retried_alone_after_oom" not in verdict.flags
    assert calls == [False]


def test_memory_the_driver_found_short_gets_a_rerun_alone(tmp_path, monkeypatch):
    judge, calls = _candidate_says(tmp_path, monkeypatch, memory_short=True)
    verdict = judge.evaluate(TASK, tmp_path, timing=False)
    assert verdict.correct, verdict.error
    assert verdict.flags["retried_alone_after_oom"] == ["candidate"]
    assert calls == [False, True]


def test_the_driver_does_not_take_the_candidates_word(tmp_path):
    """A real candidate that raises an out-of-memory error of its own making, with the host's
    memory mostly free: the driver reports no shortage, so there is no rerun alone."""
    write_kernel_only_solution(tmp_path, "cpu")
    source = (tmp_path / "model_new.py").read_text()
    (tmp_path / "model_new.py").write_text(
        source.replace(
            "        x, gate = x.contiguous()",
            f"        raise RuntimeError({OOM!r})\n        x, gate = x.contiguous()",
        )
    )
    judge = Judge(JudgeConfig(device="cpu", baselines=("eager",), timed_runs=3))
    verdict = judge.evaluate(TASK, tmp_path, timing=False)
    assert not verdict.correct and "out of memory" in verdict.error.lower()
    assert "retried_alone_after_oom" not in verdict.flags
