import pytest

from cuda_gym.synth.compose import compose
from cuda_gym.synth.config import SynthConfig
from cuda_gym.synth.filters import FilterSettings, FixedSource, degeneracy, run_filters

SETTINGS = FilterSettings(device="cpu", window_ms=(0.0, 10_000.0), compile_check=False)

TEMPLATE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
"""


def judge(expr, settings=SETTINGS):
    return run_filters(FixedSource(TEMPLATE.format(expr=expr)), settings)


def test_a_good_task_passes_every_filter():
    report = judge("torch.tanh(x) * 2.0 + torch.sigmoid(x)")
    assert report.accepted and report.failed is None
    assert {
        "eager",
        "deterministic",
        "input_sensitive",
        "not_degenerate",
        "time_window",
        "trivial_answers",
    } <= set(report.filters)
    assert report.eager_ms > 0


@pytest.mark.parametrize(
    "expr, failed",
    [
        ("x.nonexistent_method()", "eager"),
        ("torch.log(x - 10.0)", "eager"),  # NaN outputs
        ("torch.nn.functional.dropout(x, 0.5, training=True)", "deterministic"),
        ("x * 0.0", "input_sensitive"),
        ("x.mean(dim=1, keepdim=True).expand(-1, 128) + x[:1] * 0 + x.sum() * 0", "not_degenerate"),
        ("torch.tanh(x) * 1e-5", "trivial_answers"),  # zeros pass within atol 1e-2
        ("x.clone()", "trivial_answers"),  # the input itself is the answer
    ],
)
def test_bad_tasks_fail_the_right_filter(expr, failed):
    report = judge(expr)
    assert not report.accepted
    assert report.failed == failed, report.filters
    assert report.filters[failed]["passed"] is False


def test_time_window_rejects_a_task_outside_it():
    settings = FilterSettings(device="cpu", window_ms=(5_000.0, 10_000.0), compile_check=False)
    report = judge("torch.tanh(x)", settings)
    assert report.failed == "time_window"
    assert report.filters["time_window"]["window_ms"] == [5_000.0, 10_000.0]


def test_degeneracy_reasons():
    import torch

    assert degeneracy(torch.zeros(4, 4)).startswith("near zero")
    assert degeneracy(torch.full((4, 4), 3.0)) == "constant"
    assert degeneracy(torch.arange(4.0).repeat(3, 1)) == "uniform along dim 0"
    assert degeneracy(torch.randn(4, 4)) is None


def test_calibration_rescales_the_batch_into_the_window():
    cfg = SynthConfig(seed=0, chain_lengths={1: 1.0}, family_weights={"matmul": 100.0})
    cand = compose(0, cfg)
    big = cand.with_batch_size(cand.batch_size * 64)
    settings = FilterSettings(device="cpu", window_ms=(0.01, 2.0), compile_check=False)
    report = run_filters(big, settings)
    assert report.batch_size < big.batch_size
    assert report.filters["time_window"]["calibrated"] is True
