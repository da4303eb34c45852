"""Shared fixtures: one test JudgeConfig, a private cache per session, and GPU test skipping.

Tiers: a plain `python -m pytest` runs the fast tier (setup.cfg: `-m "not slow and not gpu"`):
no compiling, no real judgement. `-m slow` builds C++ and judges for real on the CPU; `-m gpu`
needs a CUDA GPU. Every test that judges on the CPU uses TEST_JUDGE, so the session's cache
holds one set of baselines per task, timed once.
"""

from __future__ import annotations

import os

import pytest

from cuda_gym.judge import JudgeConfig

# The one judge configuration of the CPU tests that judge for real (slow tier). Eager is not
# timed again after every candidate (the CPU's default: a steadier speedup, at a runner's start
# and a timing per judgement); test_judge_cpu.py checks that default.
TEST_JUDGE = JudgeConfig(
    device="cpu", timed_runs=5, warmup_runs=1, run_timeout_s=60, retime_baselines=()
)


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Every build and baseline of this run goes to a fresh cache directory.

    Under pytest-xdist (`-n N`) the workers share one cache (the judge's cache is safe for
    concurrent processes), so a task's probe and baselines are still made once per run. Without
    a GPU each worker gets its own device gates, so tests in different workers never wait for
    each other; with one they share them, and with them the GPU's memory ledger (kept beside the
    gates): four workers' judgements each sure of the whole card ran out of memory on an 80 GB
    H100.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = shared / "cuda_gym_cache"
    path.mkdir(exist_ok=True)
    gates = (shared if _cuda_available() else base) / "cuda_gym_gates"
    gates.mkdir(exist_ok=True)
    saved = {name: os.environ.get(name) for name in ("CUDA_GYM_CACHE", "CUDA_GYM_GATE_DIR")}
    os.environ["CUDA_GYM_CACHE"] = str(path)
    os.environ["CUDA_GYM_GATE_DIR"] = str(gates)
    yield path
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # torch missing or broken: no GPU tests
        return False


# Files holding the slow tier's longest tests (about a minute or more each on two cores),
# started first so that `-n N` workers finish together instead of one running a long test at
# the end alone. Whole files, so that a module's fixtures are not set up twice.
LONGEST_FIRST = (
    "tests/judge/test_pch.py::",
    "tests/agent_trainer/test_end_to_end.py::",
    "tests/test_cli.py::",
    "tests/test_false_rejections.py::",
    "tests/test_stress.py::",
    "tests/kernelbench/test_harness_cpu.py::",
    "tests/synth/test_pipeline.py::",
    "tests/test_service.py::",
    "tests/test_rl_load.py::",
    "tests/test_concurrency_benchmark.py::",
    "tests/judge/test_device_gate_judge.py::",
    "tests/test_step_latency.py::",
)


def _rank(item) -> int:
    for k, prefix in enumerate(LONGEST_FIRST):
        if item.nodeid.startswith(prefix):
            return k
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_rank)  # stable: the rest keep their order
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
