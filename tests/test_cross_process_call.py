"""The cross-process call benchmark's plumbing (the GPU conditions run on the device)."""

import json

from benchmarks import cross_process_call


def test_the_cpu_plumbing_times_idle_calls_and_writes_its_report(tmp_path):
    out = tmp_path / "r.json"
    report = cross_process_call.main(["--device", "cpu", "--calls", "5", "--out", str(out)])
    assert list(report["ms"]) == ["none"]
    assert 0 < report["ms"]["none"]["idle"] < 1000
    assert json.loads(out.read_text())["calls"] == 5
