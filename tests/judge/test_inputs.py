"""Correctness-trial inputs: each distribution's properties, bitwise repeatable, in pieces."""

import math

import pytest
import torch

import cuda_gym.judge.inputs as inputs_module
from cuda_gym.judge.inputs import DISTRIBUTIONS, make_inputs


class _Task:
    """A task module's stand-in: get_inputs() draws from torch's seeded generator."""

    def __init__(self, *shape: int) -> None:
        self.shape = shape

    def get_inputs(self):
        return [torch.randn(*self.shape), torch.randn(*self.shape).abs() + 0.5, 7]


@pytest.fixture(params=[False, True], ids=["whole", "in_pieces"])
def pieces(request, monkeypatch):
    # In pieces: a piece far smaller than the input (1000 of 12000 elements, and a last one
    # that is short), the path KernelBench's largest inputs take.
    if request.param:
        monkeypatch.setattr(inputs_module, "CHUNK", 1000)
    return request.param


@pytest.mark.parametrize("distribution", sorted(set(DISTRIBUTIONS)))
def test_every_distribution_is_bitwise_repeatable_and_keeps_signs(pieces, distribution):
    task = _Task(120, 100)
    a = make_inputs(task, 123, "cpu", distribution)
    b = make_inputs(task, 123, "cpu", distribution)
    original = make_inputs(task, 123, "cpu", "as_is")
    assert a[2] == 7
    for x, y, o in zip(a[:2], b[:2], original[:2]):
        assert torch.equal(x, y)
        assert x.shape == o.shape and x.dtype == o.dtype and x.is_contiguous()
        assert torch.isfinite(x).all()
        if distribution != "uniform":  # a multiplier keeps every sign
            assert torch.equal(torch.sign(x), torch.sign(o))
    assert not torch.equal(a[0], make_inputs(task, 124, "cpu", distribution)[0]) or (
        distribution == "as_is"
    )


def test_uniform_stays_within_the_original_range_and_fills_it(pieces):
    task = _Task(120, 100)
    x = make_inputs(task, 5, "cpu", "uniform")[0]
    o = make_inputs(task, 5, "cpu", "as_is")[0]
    assert x.min() >= o.min() and x.max() <= o.max()
    # Every piece is drawn anew: no piece repeats another's values.
    assert x.view(-1)[:1000].std() > 0.5 * (o.max() - o.min()) / math.sqrt(12)
    assert not torch.equal(x.view(-1)[:1000], x.view(-1)[1000:2000])


@pytest.mark.parametrize(("mask", "top"), [("r", 2), ("1", -1)], ids=["real", "observed"])
def test_wide_range_spreads_magnitudes_over_decades(pieces, mask, top):
    task = _Task(120, 100)
    x = make_inputs(task, 9, "cpu", f"wide_range@0{mask}")[1]  # the positive input
    o = make_inputs(task, 9, "cpu", "as_is")[1]
    ratio = (x / o).log10()
    assert ratio.min() < top - 4.5 and ratio.max() > top + 0.5
    assert ratio.max() <= top + 1  # observed domain: every multiplier at most 1
    # Each decade gets about a sixth, in the first piece and the last.
    for part in (ratio.view(-1)[:1000], ratio.view(-1)[-1000:]):
        counts = torch.histc(part.floor(), bins=6, min=top - 5, max=top)
        assert counts.min() > 100


def test_heavy_tailed_multipliers_are_mostly_near_one_with_rare_far_ones(pieces):
    task = _Task(120, 100)
    x = make_inputs(task, 3, "cpu", "heavy_tailed@0r")[1]
    o = make_inputs(task, 3, "cpu", "as_is")[1]
    log2 = (x / o).log2()
    assert 0.8 < log2.std() < 1.4  # 0.75 / ln 2 = 1.08
    assert log2.abs().max() > 3.5


def test_observed_domain_keeps_every_value_within_its_draw(pieces):
    task = _Task(120, 100)
    o = make_inputs(task, 4, "cpu", "as_is")
    for name in ("uniform", "heavy_tailed", "wide_range"):
        x = make_inputs(task, 4, "cpu", name)  # no mask: every float input, observed domain
        assert x[0].min() >= o[0].min() and x[0].max() <= o[0].max()
        if name != "uniform":  # multipliers in (0, 1]: signs stay, magnitudes only shrink
            assert all(bool((a.abs() <= b.abs()).all()) for a, b in zip(x[:2], o[:2]))
            assert torch.equal(torch.sign(x[1]), torch.sign(o[1]))


def test_a_mask_leaves_its_zero_inputs_as_drawn():
    task = _Task(30, 20)
    o = make_inputs(task, 4, "cpu", "as_is")
    x = make_inputs(task, 4, "cpu", "heavy_tailed@10")
    assert torch.equal(x[1], o[1]) and not torch.equal(x[0], o[0])


@pytest.mark.parametrize("spec", ["gaussian_mixture", "uniform@2", "uniform@1x"])
def test_a_bad_distribution_is_refused(spec):
    with pytest.raises(ValueError, match="distribution"):
        make_inputs(_Task(4, 4), 1, "cpu", spec)


def test_a_non_contiguous_input_keeps_its_layout(monkeypatch):
    monkeypatch.setattr(inputs_module, "CHUNK", 1000)

    class Transposed:
        def get_inputs(self):
            return [torch.randn(100, 120).t()]

    x = make_inputs(Transposed(), 1, "cpu", "wide_range@r")[0]
    assert x.shape == (120, 100) and x.stride() == (1, 120)
    assert torch.equal(x, make_inputs(Transposed(), 1, "cpu", "wide_range@r")[0])
