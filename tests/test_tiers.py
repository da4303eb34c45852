"""The CI tier runner: its commands name tests and suites that exist."""

import importlib
import sys

from tests.tiers import DEFAULT_TIERS, REPRESENTATIVE_TESTS, TIERS, command


def test_the_deselected_tests_exist():
    for test in REPRESENTATIVE_TESTS:
        path, name = test.split("::")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert callable(getattr(module, name)), test


def test_each_tier_runs_under_this_python():
    for tier in TIERS:
        argv = command(tier, 2)
        assert argv[:2] == [sys.executable, "-m"]
    assert command("slow", 2)[3:7] == ["-m", "slow", "-n", "2"]
    assert "-n" not in command("slow", 1)
    assert command("fast", 2)[2:] == ["pytest", "-n", "2"] and command("fast", 1)[2:] == ["pytest"]
    suite = command("exploits", 3)
    assert suite[2:] == ["benchmarks.exploits", "--device", "cpu", "--jobs", "3"]
    assert command("behind_static", 2)[2:] == [*suite[2:5], "--jobs", "2", "--behind-static"]
    importlib.import_module("benchmarks.false_rejections")  # the optional tier's suite
    assert set(DEFAULT_TIERS) < set(TIERS)
