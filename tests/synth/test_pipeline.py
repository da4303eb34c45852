import dataclasses
import json
import time
from pathlib import Path

import gymnasium as gym
import pytest

import cuda_gym
from cuda_gym.cli import main
from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.synth.config import SynthConfig
from cuda_gym.synth.filters import RESOURCE, FilterReport, filter_job
from cuda_gym.synth.pipeline import RESOURCE_RETRIES, synthesize
from cuda_gym.synth.pool import InlinePool, LocalProcessPool
from cuda_gym.tasks import load_task_dir, load_task_parquet

QUICK = SynthConfig(n=3, seed=5, compile_check=False, window_ms=(0.0, 10_000.0), workers=1)


def inline():
    return InlinePool("cuda_gym.synth.filters:filter_job")


def test_fixed_seed_gives_the_same_tasks():
    first = synthesize(QUICK, pool=inline())
    second = synthesize(QUICK, pool=inline())
    assert [t["source"] for t in first.tasks] == [t["source"] for t in second.tasks]
    assert [t["task_id"] for t in first.tasks] == [t["task_id"] for t in second.tasks]
    assert len({t["provenance"]["index"] for t in first.tasks}) == 3


class CountingPool:
    """An inline pool that counts the candidates it filters."""

    def __init__(self) -> None:
        self.inner = inline()
        self.keys: list[int] = []

    def submit(self, key, payload):
        self.keys.append(key)
        self.inner.submit(key, payload)

    def next_result(self):
        return self.inner.next_result()

    @property
    def pending(self):
        return self.inner.pending

    def close(self):
        self.inner.close()


def test_journal_resumes_without_refiltering(tmp_path):
    journal = tmp_path / "journal.jsonl"
    small = dataclasses.replace(QUICK, n=2, journal=str(journal))
    first = synthesize(small, pool=inline())
    assert len(first.tasks) == 2 and journal.exists()
    # A killed run can leave half a line: it is skipped, not fatal.
    with journal.open("a") as f:
        f.write('{"fingerprint": {"dev')
    counting = CountingPool()
    resumed = synthesize(dataclasses.replace(small, n=3), pool=counting)
    assert len(resumed.resumed) == len(first.records)
    assert not set(counting.keys) & resumed.resumed  # finished candidates are not filtered again
    assert [t["source"] for t in resumed.tasks] == [
        t["source"] for t in synthesize(QUICK, pool=inline()).tasks
    ]
    # Other settings do not reuse the journal's records.
    other = synthesize(dataclasses.replace(small, seed=6), pool=inline())
    assert other.resumed == set()


def test_time_limit_stops_and_keeps_what_finished(tmp_path):
    journal = tmp_path / "journal.jsonl"
    config = dataclasses.replace(QUICK, n=50, journal=str(journal), time_limit_s=1e-6)
    run = synthesize(config, pool=inline())
    assert run.stopped_by_time_limit and len(run.tasks) < 50


def test_near_duplicates_are_dropped():
    config = SynthConfig(
        **{
            **QUICK.__dict__,
            "n": 4,
            "chain_lengths": {1: 1.0},
            "family_weights": {
                "attention": 1.0,
                **{
                    f: 0.0
                    for f in (
                        "matmul",
                        "conv",
                        "pooling",
                        "norm",
                        "activation",
                        "reduction",
                        "softmax",
                        "elementwise",
                        "loss",
                        "indexing",
                        "dropout",
                    )
                },
            },
        }
    )
    run = synthesize(config, pool=inline())
    # Only two attention operators exist: two tasks at most, the rest are duplicates.
    assert len(run.tasks) == 2
    assert any(r["failed"] == "near_duplicate" for r in run.records)
    assert len({t["name"] for t in run.tasks}) == 2


def _out_of_memory_report() -> FilterReport:
    report = FilterReport()
    report.failed = RESOURCE
    report.filters = {RESOURCE: {"passed": False, "error": "OutOfMemoryError: CUDA out of memory"}}
    return report


def _oom_unless_exclusive(payload, lock):
    """A device shared with greedy workers: every first try runs out of memory."""
    candidate, settings = payload
    if not settings.exclusive:
        return _out_of_memory_report()
    return filter_job(payload, lock)


def _always_oom(payload, lock):
    raise RuntimeError("CUDA error: out of memory")


def test_out_of_memory_is_retried_alone_not_counted_as_a_filter(tmp_path):
    pool = InlinePool("tests.synth.test_pipeline:_oom_unless_exclusive")
    run = synthesize(QUICK, pool=pool)
    reference = synthesize(QUICK, pool=inline())
    assert [t["source"] for t in run.tasks] == [t["source"] for t in reference.tasks]
    pooled = [r for r in run.records if "resource_retries" in r]
    assert pooled and all(r["resource_retries"] == 1 for r in pooled)
    assert RESOURCE not in run.filter_stats()
    assert all(RESOURCE not in r["filters"] for r in run.records)


def test_candidates_out_of_memory_every_time_are_retried_by_a_resumed_run(tmp_path):
    config = dataclasses.replace(QUICK, n=2, journal=str(tmp_path / "j.jsonl"), max_candidates=4)
    first = synthesize(config, pool=InlinePool("tests.synth.test_pipeline:_always_oom"))
    assert first.tasks == []
    failed = [r for r in first.records if r["failed"] == RESOURCE]
    assert failed and all(r["resource_retries"] == RESOURCE_RETRIES for r in failed)
    assert first.filter_stats()[RESOURCE]["passed"] == 0
    second = synthesize(dataclasses.replace(config, max_candidates=None), pool=inline())
    assert len(second.tasks) == 2
    assert not {r["index"] for r in failed} & second.resumed


def _sleepy(payload, lock):
    time.sleep(payload)
    return payload


@pytest.mark.slow
def test_process_pool_survives_a_hung_job():
    # The deadline also covers the fresh worker's imports: generous, for a loaded CI machine.
    with LocalProcessPool("tests.synth.test_pipeline:_sleepy", workers=1, timeout_s=15) as pool:
        pool.submit("slow", 600)
        pool.submit("fast", 0)
        results = {r.key: r for r in (pool.next_result(), pool.next_result())}
    assert not results["slow"].ok and "timed out" in results["slow"].error
    assert results["fast"].ok and results["fast"].value == 0


def _holds_with_the_other(payload, lock):
    """Whether the other worker held its timing lock while this one held its own.

    Each says it started, takes its lock, says it holds it, and (once the other has started)
    waits a few seconds for the other to say the same: no fixed sleep that a slow start of the
    other worker on a loaded machine could outlast.
    """
    folder, me, other = payload
    folder = Path(folder)
    (folder / f"started-{me}").touch()
    with lock:
        (folder / f"holds-{me}").touch()
        deadline = time.monotonic() + 60
        while not (folder / f"started-{other}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        deadline = time.monotonic() + 3
        while not (folder / f"holds-{other}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen = (folder / f"holds-{other}").exists()
        (folder / f"holds-{me}").unlink()
    return seen


def _overlap(spans) -> bool:
    (a0, a1), (b0, b1) = sorted(spans)
    return b0 < a1


def _gated_span(payload, lock):
    seconds, exclusive = payload
    with lock.exclusive() if exclusive else lock.shared():
        start = time.monotonic()
        time.sleep(seconds)
        return start, time.monotonic(), exclusive


def test_an_exclusive_job_runs_alone_on_its_device():
    target = "tests.synth.test_pipeline:_gated_span"
    with LocalProcessPool(target, workers=3, timeout_s=60) as pool:
        for payload in ((1.0, False), (1.0, True), (1.0, False), (1.0, False)):
            pool.submit(payload, payload)
        spans = [pool.next_result().value for _ in range(4)]
    alone = [sp for sp in spans if sp[2]]
    shared = [sp for sp in spans if not sp[2]]
    assert len(alone) == 1
    assert not any(_overlap([alone[0][:2], sp[:2]]) for sp in shared)
    assert any(_overlap([a[:2], b[:2]]) for a in shared for b in shared if a is not b)


@pytest.mark.slow
def test_a_killed_worker_does_not_keep_the_device_gate():
    target = "tests.synth.test_pipeline:_gated_span"
    # The deadline also covers a fresh worker's imports: generous, for a loaded CI machine.
    with LocalProcessPool(target, workers=2, timeout_s=15) as pool:
        pool.submit("stuck", (600, False))  # holds the gate shared until killed at 15 s
        first = pool.next_result()
        pool.submit("alone", (0.1, True))
        second = pool.next_result()
    assert not first.ok and "timed out" in first.error
    assert second.ok and second.value[2]


@pytest.mark.parametrize("devices,overlap", [(("0", "1"), True), (("0", "0"), False)])
def test_process_pool_has_one_timing_lock_per_device(devices, overlap, tmp_path):
    env = [{"CUDA_VISIBLE_DEVICES": d} for d in devices]
    target = "tests.synth.test_pipeline:_holds_with_the_other"
    with LocalProcessPool(target, workers=2, timeout_s=120, per_worker_env=env) as pool:
        for me, other in (("a", "b"), ("b", "a")):
            pool.submit(me, (str(tmp_path), me, other))
        seen = [pool.next_result().value for _ in range(2)]
    assert any(seen) is overlap


@pytest.mark.slow
def test_cli_synth_writes_tasks_that_load_and_are_judgeable(tmp_path, capsys):
    out = tmp_path / "x.parquet"
    code = main(
        ["synth", "--n", "3", "--device", "cpu", "--seed", "3", "--out", str(out), "--no-progress"]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "filter" in printed and "compile" in printed and "chain length" in printed
    tasks = load_task_parquet(out)
    assert len(tasks) == 3
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["n_accepted"] == 3
    for task in tasks:
        prov = tasks.meta[task.task_id]["provenance"]
        assert prov["device"] == "cpu" and prov["torch"] and prov["seed"] == 3
        assert prov["filters"]["compile"]["passed"] and prov["eager_ms"] > 0

    # Round trip through the judge and the env: the reference runs in the judge's own worker,
    # and no trivial answer (zeros, mean, input) passes in any precision mode.
    judge = Judge(JudgeConfig(device="cpu", run_timeout_s=120))
    for task in tasks:
        probe = judge.probe_task(task)
        assert probe["degenerate"] == {"strict": [], "kernelbench": [], "paper": []}
    env = gym.make(
        "CudaKernel-v0",
        device="cpu",
        task_source=str(out),
        judge=JudgeConfig(device="cpu", timed_runs=3, warmup_runs=1),
    )
    for task_id in tasks.ids():  # every task starts an episode
        obs, info = env.reset(seed=0, options={"task_id": task_id})
        assert info["task_id"] == task_id and "class Model" in obs
    obs, info2 = env.reset(seed=1)
    assert info2["task_id"] in tasks.ids()
    model_new = (
        "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self, *args):\n        super().__init__()\n\n"
        "    def forward(self, x, *rest):\n        return x\n"
    )
    env.step({"name": "write_file", "arguments": {"path": "model_new.py", "content": model_new}})
    _, reward, terminated, _, info = env.step({"name": "submit", "arguments": {}})
    assert terminated and reward == -1.0
    assert info["verdict"]["verdict"] == "reject" and info["verdict"]["error"]
    env.close()

    # A directory output holds plain KernelBench files too.
    out_dir = tmp_path / "dir"
    assert (
        main(
            [
                "synth",
                "--n",
                "1",
                "--device",
                "cpu",
                "--out",
                str(out_dir),
                "--no-compile",
                "--no-progress",
            ]
        )
        == 0
    )
    assert len(load_task_dir(out_dir / "tasks")) == 1
    assert cuda_gym.tasks.load_task_parquet(out_dir / "tasks.parquet").ids()


def test_bad_config_is_rejected():
    from cuda_gym.errors import ConfigError

    with pytest.raises(ConfigError, match="chain_lengths"):
        SynthConfig(chain_lengths={7: 1.0})
    with pytest.raises(ConfigError, match="families"):
        SynthConfig(family_weights={"convs": 1.0})
    assert main(["synth", "--n", "1", "--out", "x.parquet", "--chain-lengths", "2-1"]) == 2
