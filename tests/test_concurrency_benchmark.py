"""The concurrency benchmark on the CPU device: one level, forked judge workers."""

import json

import pytest

from benchmarks.concurrency import main


@pytest.mark.slow
def test_concurrency_report_with_forked_workers(tmp_path):
    out = tmp_path / "concurrency.json"
    argv = ["--device", "cpu", "--levels", "2", "--solutions", "2", "--fast-worker-start"]
    returned = main([*argv, "--out", str(out)])
    report = json.loads(out.read_text())
    assert report == json.loads(json.dumps(returned))
    assert report["fast_worker_start"] and report["zygote_failures"] == []
    assert report["command"].endswith("--fast-worker-start --out " + str(out))
    assert report["warmup_reward"] >= 1
    (level,) = report["levels"]
    assert level["concurrency"] == 2 and level["solutions"] == 2 and level["all_correct"]
    assert level["judged_per_minute"] > 0
