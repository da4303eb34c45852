"""The trusted driver and its untrusted runner, end to end on the CPU (builds C++: slow)."""

import os
import subprocess
import time
from pathlib import Path

import pytest

from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.judge.untrusted import RUNNER_PATH
from cuda_gym.tasks import builtin_task
from tests.solutions import TASK_ID, write_solution

pytestmark = pytest.mark.slow

# Raises at construction if anything of the judge is importable from the candidate's process.
# (The solution's Python reaches no sys.modules; its C++ does.)
SNOOPING_MODEL_NEW = '''
import kernels_ext
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SNOOP = r"""
#include <torch/extension.h>
namespace py = pybind11;

std::vector<std::string> found_modules() {
  std::vector<std::string> found;
  // (sys by the builtins' __import__, its name built at run time: the source scan refuses
  // PySys_ and the dunder names, and sys is imported already: no audit event)
  auto builtins = py::reinterpret_borrow<py::dict>(PyEval_GetBuiltins());
  const std::string dunder = "__";
  auto sys = builtins[py::str(dunder + "import" + dunder)]("sys");
  auto modules = py::reinterpret_borrow<py::dict>(sys.attr("modules"));
  for (auto item : modules) {
    std::string name = py::str(item.first);
    if (name.rfind("cuda_gym", 0) == 0 || name == "reference_task" || name == "model")
      found.push_back(name);
  }
  return found;
}
"""

_FOUND = load_inline(
    name="test_snoop_modules", cpp_sources=SNOOP, functions=["found_modules"]
).found_modules()


class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        if _FOUND:
            raise RuntimeError(f"found in the candidate's process: {_FOUND}")
        self.gate_bias = nn.Parameter(torch.empty(hidden_size))

    def forward(self, x, gate):
        return kernels_ext.gated_multiply(x, gate, self.gate_bias)
'''


@pytest.fixture
def task():
    return builtin_task(TASK_ID).for_device("cpu")


def test_the_candidates_process_holds_no_judge_module_and_is_timed_by_the_driver(task, tmp_path):
    """The snooping C++ reaches Python's objects, which the static rules refuse
    (python_from_native): judged behind them, as the exploit suite's --behind-static does."""
    from benchmarks.case_suite import static_checks_skipped

    root = write_solution(tmp_path / "solution", "cpu", "correct")
    (root / "model_new.py").write_text(SNOOPING_MODEL_NEW)
    judge = Judge(JudgeConfig(device="cpu", baselines=("eager",)))  # the session's cache
    with static_checks_skipped():
        verdict = judge.evaluate(task, root)
    assert verdict.correct, verdict.error
    timing = verdict.flags["candidate_timing"]
    assert timing["runs"] >= judge.config.timed_runs and timing["rechecked_calls"] >= 2
    assert timing["rechecked_by_seed"] is True  # the builtin task's inputs: drawn again
    assert timing["round_trip_ms"] > 0 and timing["finish_ms"] > 0 and verdict.time_ms["eager"] > 0
    assert verdict.checks["timing_recheck"] is True


def test_a_candidate_cannot_stall_the_round_trip_subtracted_from_its_time(tmp_path):
    """The exploit case's C++ thread holds the GIL in the phase where a driver measuring its
    round trip after the correctness calls would have measured it (~4 ms per empty call, every
    timed call that much faster): the round trip is measured before the candidate is loaded.
    (The thread's work between calls is then async_work when the samples see enough of it.)"""
    from benchmarks.exploits import SUITE

    case = next(c for c in SUITE.load_cases(device="cpu") if c.name == "round_trip_stall_cpp")
    root = SUITE.write_solution(case, "cpu", tmp_path / "solution")
    # 5 correctness trials; no more calls for the sampler (with them the thread's work between
    # calls is async_work before any timing)
    judge = Judge(JudgeConfig(device="cpu", baselines=("eager",), cpu_census_s=0))
    verdict = judge.evaluate(builtin_task(case.task).for_device("cpu"), root)
    # Whether the thread's stall between calls lasts the samples that make it async_work
    # depends on the machine's load (CI saw both): then the solution is rejected before any
    # timing, which leaves the stall nothing to buy either. The exploit suite's run, with
    # census calls, pins async_work; here the round trip, when timed, is the point.
    kinds = {v.split(":")[0] for v in verdict.violations}
    assert kinds <= {"async_work"}, verdict.violations
    if kinds:
        assert verdict.verdict == "reject" and verdict.reward < 0
        return
    assert verdict.checks["timing_recheck"] is True, verdict.error
    assert verdict.flags["candidate_timing"]["round_trip_ms"] < 2.0


EARLY_DONE_FORWARD = """
    def forward(self, x, gate):
        kernels_ext.early_done(x, gate, self.gate_bias)
        return kernels_ext.gated_naive(x, gate, self.gate_bias)
"""


def test_an_early_done_is_refused_before_any_call_is_timed(tmp_path):
    """The exploit case answers "done" itself before computing, with the call's nonce read from
    the runner's objects, which it finds with gc: refused statically (python_from_native) and,
    behind that, at run time (the heap walk from the solution), so no call of it is timed. (The
    judge's charge for time from "done" to the reply, what an early "done" would meet next, is
    tested in tests/judge/test_roofline.py.)"""
    from benchmarks.case_suite import static_checks_skipped
    from benchmarks.exploits import SUITE

    case = next(c for c in SUITE.load_cases(device="cpu") if c.name == "early_done_cpp")
    root = SUITE.write_solution(case, "cpu", tmp_path / "early_done")
    source = (root / "model_new.py").read_text()
    forward = source[source.index("    def forward") :]
    (root / "model_new.py").write_text(source.replace(forward, EARLY_DONE_FORWARD.lstrip("\n")))
    judge = Judge(JudgeConfig(device="cpu", baselines=("eager",)))
    task = builtin_task(case.task).for_device("cpu")
    assert "static:python_from_native" in judge.evaluate(task, root).violations[0]
    with static_checks_skipped():
        verdict = judge.evaluate(task, root)
    assert verdict.verdict == "reject" and verdict.time_ms["candidate"] is None
    assert "`gc.get_objects` raised by" in verdict.violations[0], verdict.violations


def started_at(pid: str) -> float:
    """When process `pid` started (seconds since the epoch); infinity when it has ended."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime")
        )
    except (OSError, IndexError, ValueError, StopIteration):
        return float("inf")
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def runners() -> set[str]:
    found = subprocess.run(["pgrep", "-f", str(RUNNER_PATH)], capture_output=True, text=True)
    return set(found.stdout.split())


def test_a_hanging_candidate_leaves_no_process_behind(task, tmp_path):
    root = write_solution(tmp_path / "solution", "cpu", "spin")
    config = JudgeConfig(device="cpu", run_timeout_s=20)
    before = runners()
    verdict = Judge(config).evaluate(task, root, timing=False)
    assert not verdict.correct and "timed out" in verdict.error
    # Runners of other tests (pytest-xdist workers) come and go; ours must be gone. A runner
    # started before the verdict and still alive 90 s later is a leftover.
    ended = time.time()
    deadline = time.monotonic() + 90
    while left := {p for p in runners() - before if started_at(p) <= ended}:
        assert time.monotonic() < deadline, f"runners left behind: {left}"
        time.sleep(1)
