"""Strict mode admits every correct fp32 algorithm and still refuses TF32/FP16/BF16 downgrades.

Each honest alternative below is written in torch and computes in fp32 in its own order:
serial (left-to-right) sums and scans, naive K-loop matmuls up to KernelBench's largest K,
Kahan summation, split-K and tree reductions. The bound comes from judge/contract.py's
accumulation units and |x|-weighted magnitudes, as the judge computes it.
"""

import copy

import pytest
import torch
import torch.nn as nn

from cuda_gym.judge.compare import check_outputs_match
from cuda_gym.judge.contract import accumulation_units, strict_scales
from cuda_gym.judge.inputs import make_inputs


def judge_strict(model: nn.Module, inputs: list, candidate: list):
    """The strict comparison of `candidate` with `model`'s outputs, scaled as the judge does."""
    model64 = copy.deepcopy(model).double()
    inputs64 = [x.double() for x in inputs]
    with torch.no_grad():
        out = model(*inputs)
        out64 = model64(*inputs64)
        units = accumulation_units(model64, inputs64)
        scales = strict_scales(model64, inputs, units)
    out = list(out) if isinstance(out, tuple) else [out]
    out64 = list(out64) if isinstance(out64, tuple) else [out64]
    return check_outputs_match([out], [candidate], "strict", [out64], scales=[scales])


class RowSum(nn.Module):
    def forward(self, x):
        return x.sum(dim=-1)


class RowCumsum(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=-1)


class Matmul(nn.Module):
    def forward(self, a, b):
        return a @ b


class Softplus(nn.Module):
    def forward(self, x):
        return torch.nn.functional.softplus(x)


def serial_sum(x: torch.Tensor) -> torch.Tensor:
    """Left to right, one fp32 add at a time (per row)."""
    s = torch.zeros(x.shape[0], dtype=torch.float32)
    for k in range(x.shape[1]):
        s += x[:, k]
    return s


def kahan_sum(x: torch.Tensor) -> torch.Tensor:
    s = torch.zeros(x.shape[0], dtype=torch.float32)
    c = torch.zeros_like(s)
    for k in range(x.shape[1]):
        y = x[:, k] - c
        t = s + y
        c = (t - s) - y
        s = t
    return s


def split_k_sum(x: torch.Tensor, parts: int = 64) -> torch.Tensor:
    """Serial partial sums of `parts` slices, then a serial sum of the partials."""
    partials = torch.stack([serial_sum(p) for p in x.chunk(parts, dim=1)], dim=1)
    return serial_sum(partials)


def tree_sum(x: torch.Tensor) -> torch.Tensor:
    while x.shape[1] > 1:
        if x.shape[1] % 2:
            x = torch.cat([x, torch.zeros(x.shape[0], 1)], dim=1)
        x = x[:, 0::2] + x[:, 1::2]
    return x[:, 0]


def serial_scan(x: torch.Tensor) -> torch.Tensor:
    """A running fp32 sum, as a one-thread-per-row scan kernel computes it."""
    out = torch.empty_like(x)
    s = torch.zeros(x.shape[0], dtype=torch.float32)
    for k in range(x.shape[1]):
        s += x[:, k]
        out[:, k] = s
    return out


def naive_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C += A[:, k] B[k, :] for k = 0..K-1 in fp32: every output a serial dot product."""
    c = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k in range(a.shape[1]):
        c += a[:, k : k + 1] * b[k : k + 1, :]
    return c


def _draw(kind: str, *shape: int) -> torch.Tensor:
    return torch.randn(*shape) if kind == "randn" else torch.rand(*shape)


@pytest.mark.parametrize("kind", ["randn", "rand"])
@pytest.mark.parametrize("algorithm", [serial_sum, kahan_sum, split_k_sum, tree_sum])
def test_honest_orders_of_a_65536_sum_pass(kind, algorithm):
    torch.manual_seed(1)
    x = _draw(kind, 4, 65536)
    result = judge_strict(RowSum(), [x], [algorithm(x)])
    assert result.correct, result.details


class _PositiveRows:
    def get_inputs(self):
        return [torch.rand(4, 65536)]


@pytest.mark.parametrize("distribution", ["heavy_tailed", "wide_range"])
def test_a_serial_sum_that_stagnates_passes(distribution):
    # Positive terms over six decades: the running sum drops the terms below half its ulp.
    x = make_inputs(_PositiveRows(), 8, "cpu", distribution)[0]
    result = judge_strict(RowSum(), [x], [serial_sum(x)])
    assert result.correct, result.details


@pytest.mark.parametrize("kind", ["randn", "rand"])
def test_a_running_fp32_scan_passes(kind):
    torch.manual_seed(2)
    x = _draw(kind, 4, 32768)
    result = judge_strict(RowCumsum(), [x], [serial_scan(x)])
    assert result.correct, result.details


@pytest.mark.parametrize("kind", ["randn", "rand"])
@pytest.mark.parametrize("k", [4096, 16384, 131072])
def test_naive_k_accumulation_matmul_passes(kind, k):
    torch.manual_seed(3)
    a, b = _draw(kind, 8, k), _draw(kind, k, 8)
    result = judge_strict(Matmul(), [a, b], [naive_matmul(a, b)])
    assert result.correct, result.details


def _round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    bits = x.view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


@pytest.mark.parametrize("kind", ["randn", "rand"])
@pytest.mark.parametrize(
    "downgrade",
    [
        _round_to_tf32,
        lambda x: x.half().float(),
        lambda x: x.bfloat16().float(),
    ],
    ids=["tf32", "fp16", "bf16"],
)
def test_inputs_rounded_below_fp32_fail_a_matmul(kind, downgrade):
    torch.manual_seed(4)
    a, b = _draw(kind, 64, 2048), _draw(kind, 2048, 64)
    # Rounded inputs, then an exact product: the downgrade's whole error is the rounding.
    cheat = (downgrade(a).double() @ downgrade(b).double()).float()
    assert not judge_strict(Matmul(), [a, b], [cheat]).correct


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_an_elementwise_op_computed_in_half_precision_fails(dtype):
    torch.manual_seed(5)
    x = torch.randn(256, 256)
    cheat = torch.nn.functional.softplus(x.to(dtype)).float()
    assert not judge_strict(Softplus(), [x], [cheat]).correct


def test_naive_softplus_and_fast_math_level_error_pass():
    torch.manual_seed(6)
    x = torch.randn(512, 512)
    naive = torch.log(1 + torch.exp(x))
    assert judge_strict(Softplus(), [x], [naive]).correct
    # 8 ulps of every value, about what __expf and __logf lose together.
    fast = naive * (1 + 8 * 2.0**-24 * torch.sign(torch.randn_like(x)))
    assert judge_strict(Softplus(), [x], [fast]).correct


def test_a_wrong_value_still_fails_a_large_sum():
    torch.manual_seed(7)
    x = torch.randn(4, 65536)
    wrong = serial_sum(x)
    wrong[2] += 1e-3 * x.abs().sum(dim=-1)[2]  # 0.1 % of the summed magnitude
    assert not judge_strict(RowSum(), [x], [wrong]).correct
