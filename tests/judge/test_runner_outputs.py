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


def test_dense_outputs_are_handed_over_as_bytes_and_the_rest_through_pytorchs_copy(
    monkeypatch,
):
    # On the CPU the runner copies a dense output into the driver's slot with libc's memmove
    # (no PyTorch copy kernel: on a data-movement task any the sampler sees is the
    # solution's); a conjugate or negative view, or a strided one, needs PyTorch's copy.
    from cuda_gym.judge import runner
    from cuda_gym.judge.runner import Runner

    moved = []
    memmove = runner._MEMMOVE
    monkeypatch.setattr(runner, "_MEMMOVE", lambda *a: (moved.append(a[2]), memmove(*a)))
    r = Runner.__new__(Runner)
    r.torch, r.device, r.thread_ban = torch, "cpu", None
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    c = torch.complex(torch.ones(3), torch.arange(3.0))
    outputs = [x, x.t(), c.conj(), 7]
    specs = [
        {"dtype": "float32", "shape": [3, 4]},
        {"dtype": "float32", "shape": [4, 3]},
        {"dtype": "complex64", "shape": [3]},
        {"dtype": None, "shape": None},
    ]
    slots = [torch.full((3, 4), -1.0), torch.full((4, 3), -1.0), torch.zeros(3, dtype=c.dtype)]
    values, error = r._deliver(outputs, specs, [*slots, None])
    assert error is None and values == [None, None, None, 7]
    assert torch.equal(slots[0], x) and torch.equal(slots[1], x.t())
    assert torch.equal(slots[2], c.conj().resolve_conj())
    assert moved == [x.nbytes]  # (the dense one only)
