"""A reference that stores its next state on self (KernelBench's recurrent cells): an honest
candidate that does the same is judged against it call by call, every call starting from the
state the reference was built with."""

import pytest

from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.judge.static_checks import check_solution_source, reference_state
from cuda_gym.tasks.task import task_from_string

TASK = '''"""A cell carrying state across calls: out = x + state, and out is the next state."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, rows, cols):
        super().__init__()
        self.state = torch.randn(rows, cols)

    def forward(self, x):
        self.state = self.state.to(x.device)
        out = x + self.state
        self.state = out
        return out


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return [8, 64]
'''

KERNEL = """#include <cstdint>
extern "C" void add(const float* x, const float* s, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] + s[i];
}
"""

MODEL_NEW = """import torch
import torch.nn as nn

import kernels_ext


class ModelNew(nn.Module):
    def __init__(self, rows, cols):
        super().__init__()
        torch.randn(3)  # draws in another order than the reference: its state is copied in
        self.state = torch.randn(rows, cols)

    def forward(self, x):
        self.state = self.state.to(x.device)
        x = x.contiguous()
        out = torch.empty_like(x)
        kernels_ext.add(x, self.state, out, x.numel())
        self.state = out
        return out
"""


def test_the_references_stores_on_self_are_allowed_to_the_candidate():
    names = reference_state(TASK)
    assert names == {"state"}
    assert [v.rule for v in check_solution_source(MODEL_NEW)] == ["global_state"]
    assert check_solution_source(MODEL_NEW, state_names=names) == []
    stored_elsewhere = MODEL_NEW.replace("self.state = out", "self.memo = out")
    assert [v.rule for v in check_solution_source(stored_elsewhere, state_names=names)] == [
        "global_state"
    ]


def judge_stateful(root, device: str, kernel_file: str, kernel: str):
    """The verdict on MODEL_NEW (its kernel `kernel` in kernels/`kernel_file`) for TASK."""
    (root / "kernels").mkdir()
    (root / "kernels" / kernel_file).write_text(kernel)
    (root / "model_new.py").write_text(MODEL_NEW)
    task = task_from_string(TASK, "stateful_cell").for_device(device)
    judge = Judge(JudgeConfig(device=device, baselines=("eager",), timed_runs=3))
    return judge.evaluate(task, root, timing=True)


@pytest.mark.slow
def test_an_honest_stateful_candidate_is_accepted(tmp_path):
    verdict = judge_stateful(tmp_path, "cpu", "add.cpp", KERNEL)
    assert verdict.correct and verdict.verdict == "accept", (verdict.error, verdict.violations)
    assert verdict.checks["deterministic"] is True


def test_the_runner_restores_the_state_names_whatever_the_candidate_keeps_there():
    import torch

    from cuda_gym.judge import runner

    class Cell(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.state = torch.zeros(2, 3)  # copied from the reference
            self.register_buffer("memo", torch.zeros(1))  # a buffer under a state name
            self.own = torch.ones(4)  # not the reference's: left alone

    cell = Cell()
    reference = {"state": torch.full((2, 3), 7.0), "memo": torch.ones(5), "extra": None}
    held = runner._copy_state(torch, cell, reference, "cpu")
    assert [name for _, name, _ in held] == ["state", "memo", "extra"]
    assert torch.equal(cell.state, torch.full((2, 3), 7.0))
    state, memo, own = cell.state, cell.memo, cell.own
    cell.state, cell.memo, cell.extra, cell.own = torch.ones(1), torch.ones(1), 1, torch.zeros(4)
    r = runner.Runner.__new__(runner.Runner)
    r.state = held
    r._fresh_state()
    assert cell.state is state and cell.memo is memo and not hasattr(cell, "extra")
    assert cell.own is not own  # only the reference's state names are restored


def test_a_reference_starts_every_forward_from_its_state_as_built():
    import torch

    from cuda_gym.judge import roles

    class Cell(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.state = torch.zeros(3)
            self.lin = torch.nn.Linear(3, 3)
            self.lin.mask = torch.ones(3)

        def forward(self, x):
            out = x + self.state
            self.state = out
            self.lin.mask = out
            return out

    cell = Cell()
    assert set(roles.state_tensors(cell)) == {"state", "lin.mask"}
    roles.fresh_state_each_call(cell)
    x = torch.ones(3)
    assert torch.equal(cell(x), cell(x))
    assert torch.equal(cell(x), x)
