"""The fallback ban: what it allows, what it refuses, and its own cost."""

import subprocess
import sys

import pytest
import torch

from cuda_gym.judge.fallback import COPY_OPS, FallbackBan, FallbackRefused, moves_data_only


def test_the_ban_does_not_import_dynamo():
    # TorchDispatchMode's dynamo wrapper would import torch._dynamo on the first dispatch
    # (seconds in every candidate worker); the ban skips it.
    code = (
        "import sys, torch\n"
        "from cuda_gym.judge.fallback import FallbackBan\n"
        "with FallbackBan():\n"
        "    torch.empty(3)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def _honest_housekeeping(x: torch.Tensor, scale: torch.nn.Parameter) -> list:
    """What honest solutions do around their kernels: allocate, move, copy, read a scalar."""
    return [
        torch.zeros(3).to(x.device),
        torch.empty(2, 2).cpu(),
        x.t().contiguous(),
        x.to(x.device, copy=True),
        x.clone(),
        torch.full((2,), scale.item()),
        torch.tensor([1.0, float(x[0, 0])]),
        torch.arange(4),
        x.new_ones(2),
        torch.empty_like(x.t()).copy_(x.t()),
    ]


def test_allocation_copies_and_item_are_allowed():
    ban = FallbackBan()
    x = torch.randn(4, 4)
    with torch.no_grad(), ban:
        _honest_housekeeping(x, torch.nn.Parameter(torch.tensor([0.5])))
    assert ban.violations == []


@pytest.mark.parametrize(
    "compute",
    [
        lambda x: x.half(),
        lambda x: x.to(torch.bfloat16),
        lambda x: x.double(),
        lambda x: torch.empty(4, 4, dtype=torch.float16).copy_(x),
        lambda x: x + 1,
        lambda x: x.sum().item(),
    ],
    ids=["half", "to_bf16", "double", "converting_copy", "add", "sum_item"],
)
def test_dtype_conversions_and_compute_are_refused(compute):
    ban = FallbackBan()
    with torch.no_grad(), pytest.raises(FallbackRefused, match=r"allowed: allocation"), ban:
        compute(torch.randn(4, 4))
    assert len(ban.violations) == 1


class _Forward(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


@pytest.mark.parametrize(
    "forward, moves",
    [
        (lambda x: torch.nn.functional.pad(x.transpose(-1, -2), (0, 8)), True),
        (lambda x: torch.cat([x, x.flip(0)], dim=1).contiguous(), True),
        (lambda x: x.permute(1, 0).repeat(2, 1), True),
        (lambda x: torch.nn.functional.pad(x, (1, 1)).relu(), False),
        (lambda x: x.t().contiguous().half(), False),
        (lambda x: torch.softmax(x, dim=-1), False),
    ],
    ids=["transpose_pad", "cat_flip", "permute_repeat", "pad_relu", "to_half", "softmax"],
)
def test_a_reference_that_only_moves_data_is_told_apart(forward, moves):
    # The probe's finding: where it holds, PyTorch's copies are refused in the candidate's
    # forward (they would be the task's whole computation, beside a token call of its own).
    with torch.no_grad():
        assert moves_data_only(_Forward(forward), [torch.randn(6, 5)]) is moves


def test_the_ban_without_copies_refuses_them_and_allows_the_rest():
    ban = FallbackBan()
    ban.allowed = ban.allowed - COPY_OPS
    x = torch.randn(4, 4)
    with torch.no_grad(), ban:
        out = torch.zeros(4, 6)
        out[:, :4].t()  # views and fills stay allowed
        x.contiguous()  # no copy: already contiguous
    assert ban.violations == []
    for copy in (lambda: x.t().contiguous(), lambda: x.clone(), lambda: out[:, :4].copy_(x)):
        with torch.no_grad(), pytest.raises(FallbackRefused), ban:
            copy()
    assert len(ban.violations) == 3


def test_a_reference_that_cannot_run_under_a_mode_is_judged_as_any_task():
    def fails(x):
        raise RuntimeError("no Python dispatch for this op")

    assert moves_data_only(_Forward(fails), [torch.randn(2)]) is False
