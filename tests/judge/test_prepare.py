"""prepare_tasks: probes and baselines of a task set, ahead of the episodes that need them."""

import json

import pytest

import cuda_gym.judge.prepare as prepare_module
from cuda_gym.cli import main as cli_main
from cuda_gym.errors import ConfigError, WorkerError
from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.judge.baselines import JsonCache, baseline_key
from cuda_gym.judge.client import JudgeClient
from cuda_gym.judge.prepare import PrepareReport, TaskPreparation, prepare_tasks
from cuda_gym.tasks import builtin_task, load_handwritten
from tests.solutions import write_kernel_only_solution

TASKS = ("sigmoid_gated_multiply", "weighted_row_sum", "row_softmax")


def scripted_client(tmp_path, fail_probe=(), no_baselines=()) -> JudgeClient:
    """A real JudgeClient whose judge's two expensive steps are scripted (they write the real
    caches as the judge would); `calls` records what ran."""
    config = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache")
    client = JudgeClient(config)
    judge = client.judge
    judge.calls = []
    probes = JsonCache(config.resolved_cache_dir, "probes")
    baselines = JsonCache(config.resolved_cache_dir, "baselines")

    def probe_task(task, run=None):
        judge.calls.append(("probe", task.task_id))
        if task.task_id in fail_probe:
            raise WorkerError(f"probing task {task.task_id!r} failed: scripted")
        if probes.get(task.task_id) is None:
            probes.put(task.task_id, {"distributions": ["as_is"]})
            if run is not None:
                run.update(duration_s=0.1, result={})
        return probes.get(task.task_id)

    def task_baselines(task, run=None):
        key = baseline_key(task.content_hash, judge.info, config)
        if baselines.get(key) is not None:
            return baselines.get(key)
        judge.calls.append(("baselines", task.task_id))
        if run is not None:
            run.update(duration_s=0.1, result={})
        if task.task_id in no_baselines:
            return {b: {"error": "scripted failure"} for b in config.baselines}
        baselines.put(key, {b: {"median_ms": 1.0} for b in config.baselines})
        return baselines.get(key)

    judge.probe_task = probe_task
    judge.task_baselines = task_baselines
    return client


def test_prepare_probes_and_times_once_and_reports_failures_per_task(tmp_path):
    client = scripted_client(
        tmp_path, fail_probe={"weighted_row_sum"}, no_baselines={"row_softmax"}
    )
    tasks = [builtin_task(t) for t in TASKS]
    report = prepare_tasks(tasks, client.config, workers=2, progress=False, client=client)
    assert [t.task_id for t in report.tasks] == list(TASKS)  # the order given
    gated, row_sum, softmax = report.tasks
    assert gated.ok and gated.probed and gated.baselined and gated.error is None
    assert not row_sum.ok and "scripted" in row_sum.error and not row_sum.baselined
    assert (
        not softmax.ok
        and "were not timed" in softmax.error
        and "scripted failure" in (softmax.error)
    )
    assert not report.ok
    summary = report.summary()
    assert summary["probed"] == 2 and summary["baselined"] == 2
    assert set(summary["failed"]) == {"weighted_row_sum", "row_softmax"}

    client.judge.calls.clear()
    again = prepare_tasks(tasks[:1], client.config, progress=False, client=client)
    assert again.ok and again.summary()["already_cached"] == 1
    assert client.judge.calls == [("probe", "sigmoid_gated_multiply")]  # no timing


def test_prepare_refuses_zero_workers():
    with pytest.raises(ConfigError, match="workers must be at least 1"):
        prepare_tasks([], JudgeConfig(), workers=0)


def test_cli_prepare_takes_a_task_source_and_fails_when_a_task_fails(monkeypatch, capsys):
    seen = {}

    def fake_prepare(tasks, config, *, workers):
        seen.update(ids=[t.task_id for t in tasks], device=config.device, workers=workers)
        return PrepareReport(
            tasks=[
                TaskPreparation(t.task_id, probed=True, ok=i == 0, error=None if i == 0 else "x")
                for i, t in enumerate(tasks)
            ]
        )

    monkeypatch.setattr(prepare_module, "prepare_tasks", fake_prepare)
    argv = ["prepare", "--tasks", "builtin", "--device", "cpu", "--workers", "3", "--limit", "2"]
    assert cli_main([*argv, "--json"]) == 1
    assert seen == {"ids": load_handwritten().ids()[:2], "device": "cpu", "workers": 3}
    summary = json.loads(capsys.readouterr().out)
    assert summary["tasks"] == 2 and summary["failed"] == {seen["ids"][1]: "x"}
    assert cli_main([*argv[:-1], "1"]) == 0
    assert "prepared 1 tasks" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_judgement_after_prepare_neither_probes_nor_times_baselines(tmp_path):
    config = JudgeConfig(
        device="cpu",
        timed_runs=2,
        warmup_runs=0,
        correctness_trials=2,
        baselines=("eager",),
        run_timeout_s=60,
        cache_dir=tmp_path / "cache",
        retime_baselines=(),  # the CPU's default times eager again with every candidate
    )
    tasks = [builtin_task("sigmoid_gated_multiply"), builtin_task("weighted_row_sum")]
    report = prepare_tasks(tasks, config, workers=2, progress=False)
    assert report.ok, report.summary()
    assert all(t.probed and t.baselined for t in report.tasks)

    judge = Judge(config)
    task = tasks[0].for_device("cpu")
    cached = JsonCache(config.resolved_cache_dir, "baselines")
    key = baseline_key(task.content_hash, judge.info, config)
    path = cached.root / f"{key}.json"
    before = (path.stat().st_mtime_ns, path.read_text())
    verdict = judge.evaluate(task, write_kernel_only_solution(tmp_path / "solution", "cpu"))
    assert verdict.verdict == "accept", verdict.error
    assert "probe" not in verdict.stage_times_s
    # no stage such as "reference.baseline:eager"
    assert not [s for s in verdict.stage_times_s if "baseline" in s]
    assert verdict.time_ms["eager"] == cached.get(key)["eager"]["median_ms"]
    assert (path.stat().st_mtime_ns, path.read_text()) == before
