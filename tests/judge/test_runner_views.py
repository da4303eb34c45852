"""The runner keeps its views of the driver's CUDA buffers across calls of one layout."""

import torch

from cuda_gym.judge.runner import Runner

SPEC = {"offset": 16, "shape": [2, 3], "dtype": "float32"}


def _runner(device: str = "cuda") -> Runner:
    runner = Runner(None)
    runner.torch = torch
    runner.device = device  # the views are made on CPU bytes here: only the bookkeeping runs
    return runner


def test_a_layout_seen_before_gets_the_same_view_of_the_same_bytes():
    runner, buf = _runner(), torch.zeros(64, dtype=torch.uint8)
    first = runner._placed(0, buf, SPEC)
    assert first.shape == (2, 3) and first.data_ptr() == buf.data_ptr() + 16
    assert runner._placed(0, buf, SPEC) is first
    assert runner._placed(1, buf, SPEC) is not first  # the outputs' buffer is another key


def test_a_view_forward_changed_in_place_is_made_again():
    runner, buf = _runner(), torch.zeros(64, dtype=torch.uint8)
    for change in (
        lambda v: v.unsqueeze_(0),
        lambda v: v.t_(),
        lambda v: v.set_(torch.zeros(2, 3)),
        lambda v: v.requires_grad_(),
    ):
        view = runner._placed(0, buf, SPEC)
        change(view)
        again = runner._placed(0, buf, SPEC)
        assert again is not view
        assert again.shape == (2, 3) and again.stride() == (3, 1)
        assert again.data_ptr() == buf.data_ptr() + 16 and not again.requires_grad


def test_cpu_calls_make_fresh_views_and_plain_values_pass_through():
    runner, buf = _runner("cpu"), torch.zeros(64, dtype=torch.uint8)
    assert runner._placed(0, buf, SPEC) is not runner._placed(0, buf, SPEC)
    plain = {"offset": 0, "shape": [], "dtype": "", "value": 3}
    assert _runner()._placed(0, buf, plain) == 3
