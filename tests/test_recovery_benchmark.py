"""The recovery benchmark on the CPU device: a crash is rejected and the next judgement works."""

import json

import pytest

from benchmarks.recovery import main


@pytest.mark.slow
def test_crash_then_good_judgement(tmp_path):
    out = tmp_path / "recovery.json"
    rc = main(
        ["--device", "cpu", "--warm", "1", "--only", "exit_cpp_underscore_exit", "--out", str(out)]
    )
    report = json.loads(out.read_text())
    assert rc == 0 and report["all_as_expected"]
    (row,) = report["rows"]
    assert row["failure"]["observed"] == "crash" and row["failure"]["verdict"] == "reject"
    assert row["next_good"]["verdict"] == "accept"
    assert report["recovery_s_median"] == row["next_good"]["seconds"] > 0
