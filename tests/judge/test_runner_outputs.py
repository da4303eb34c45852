"""How the runner takes forward's result apart: without running any code of the solution's."""

import collections

import torch

from cuda_gym.judge.runner import _outputs_of


class _Tuple(tuple):
    def __iter__(self):
        raise AssertionError("the runner ran the subclass's __iter__")

    def __len__(self):
        raise AssertionError("the runner ran the subclass's __len__")

    def __getitem__(self, i):
        raise AssertionError("the runner ran the subclass's __getitem__")


class _List(list):
    def __iter__(self):
        raise AssertionError("the runner ran the subclass's __iter__")

    def __len__(self):
        raise AssertionError("the runner ran the subclass's __len__")


def test_a_subclass_of_tuple_or_list_gives_the_items_it_holds_and_runs_nothing():
    x = torch.ones(2)
    assert _outputs_of(_Tuple((x, 1))) == [x, 1]
    assert _outputs_of(_List([x])) == [x]


def test_plain_results_and_named_tuples_give_their_items():
    x, y = torch.ones(2), torch.zeros(2)
    assert _outputs_of(x) == [x]
    assert _outputs_of((x, y)) == [x, y]
    assert _outputs_of([x]) == [x]
    assert _outputs_of(collections.namedtuple("Pair", "a b")(x, y)) == [x, y]
    values, indices = _outputs_of(torch.max(torch.ones(2, 3), dim=1))
    assert values.shape == indices.shape == (2,)
