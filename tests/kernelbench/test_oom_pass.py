"""Problems that run out of memory beside others are judged again, alone, at the end of a run.

The problem's reference raises an out-of-memory error on its first calls (counted in a file),
as a big KernelBench problem does when other problems' processes hold the GPU's memory; or its
process is killed by SIGKILL, as the kernel's out-of-memory killer does when they hold the
host's memory.
"""

import json
import signal

import pytest

from benchmarks.kernelbench.__main__ import main
from tests.kernelbench.tiny_kernelbench import HEADER, JUDGE_FLAGS, write_tree

pytestmark = pytest.mark.slow

PROBLEM = (
    HEADER
    + """import os

COUNT = {count!r}


class Model(nn.Module):
    def forward(self, x):
        n = int(open(COUNT).read()) if os.path.exists(COUNT) else 0
        if n < {failures}:
            open(COUNT, "w").write(str(n + 1))
            {fail}
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
"""
)


OOM = 'raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (test)")'
KILLED = f"os.kill(os.getpid(), {int(signal.SIGKILL)})"


@pytest.fixture(autouse=True)
def unsandboxed(monkeypatch):
    """The problem counts its calls in a file: its runner needs this machine's files (the
    development mode without the OS sandbox, which would refuse the write)."""
    monkeypatch.setenv("CUDA_GYM_UNSANDBOXED", "1")


def run_harness(tmp_path, failures, fail=OOM):
    count = tmp_path / "calls"
    kb = write_tree(
        tmp_path / "kb" / "KernelBench",
        {"level1/1_BigReLU.py": PROBLEM.format(count=str(count), failures=failures, fail=fail)},
    )
    out = tmp_path / "out"
    argv = ["--kernelbench-dir", str(kb), "--levels", "1", "--out", str(out), *JUDGE_FLAGS]
    argv += ["--reference-as-solution", "--baselines", "eager", "--workers", "2"]
    argv += ["--cache-dir", str(tmp_path / "cache")]
    status = main(argv)
    record = json.loads((out / "records/level1/1_BigReLU.json").read_text())
    return status, record


def test_out_of_memory_beside_others_is_judged_again_alone(tmp_path):
    # The probe and the judge's own rerun of it run out of memory; the run's alone pass works.
    status, record = run_harness(tmp_path, failures=2)
    assert status == 0
    assert record["status"] == "done" and record["correct"], record.get("error")
    assert "judged_alone" in record["flags"]


def test_out_of_memory_alone_too_is_final(tmp_path):
    status, record = run_harness(tmp_path, failures=1000)
    assert record["status"] == "error" and "out of memory" in record["error"]
    assert {"judged_alone", "out_of_memory_alone"} <= set(record["flags"])
    assert status != 0


def test_a_process_killed_beside_others_is_judged_again_alone(tmp_path):
    status, record = run_harness(tmp_path, failures=1, fail=KILLED)
    assert status == 0
    assert record["status"] == "done" and record["correct"], record.get("error")
    assert "judged_alone" in record["flags"]


def test_out_of_memory_in_a_stopped_run_is_judged_alone_first_on_resume(tmp_path):
    # A run stopped by --max-wall-s never reaches its alone pass; beside other problems again,
    # the big problem would run out of memory again (seen on the H200), so a resume judges it
    # alone before anything else.
    count = tmp_path / "calls"
    kb = write_tree(
        tmp_path / "kb" / "KernelBench",
        {
            "level1/1_BigReLU.py": PROBLEM.format(count=str(count), failures=2, fail=OOM),
            "level1/2_SmallReLU.py": PROBLEM.format(
                count=str(tmp_path / "unused"), failures=0, fail=OOM
            ),
        },
    )
    out = tmp_path / "out"
    argv = ["--kernelbench-dir", str(kb), "--levels", "1", "--out", str(out), *JUDGE_FLAGS]
    argv += ["--reference-as-solution", "--baselines", "eager", "--workers", "2"]
    argv += ["--cache-dir", str(tmp_path / "cache")]
    main([*argv, "--max-wall-s", "0.001"])
    path = out / "records/level1/1_BigReLU.json"
    assert json.loads(path.read_text())["status"] == "out_of_memory"
    assert main(argv) == 0
    record = json.loads(path.read_text())
    assert record["status"] == "done" and record["correct"], record.get("error")
    assert "judged_alone" in record["flags"]
