"""benchmarks.own_call_glue: the host cost of one call of a solution's own function."""

import pytest

from benchmarks.own_call_glue import main


@pytest.mark.slow
def test_one_call_costs_microseconds_and_sits_under_the_allowance(tmp_path):
    report = main(["--calls", "1024", "--repeats", "1", "--out", str(tmp_path / "glue.json")])
    assert report["step_us"] > report["views_us"] > 0
    assert 0 < report["call_us"] < report["allowance_us"]
    assert (tmp_path / "glue.json").is_file()
