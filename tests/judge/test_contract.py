"""The task's input contract: invariants read off its draws decide which transform touches what."""

import pytest
import torch

from cuda_gym.judge import contract
from cuda_gym.judge.inputs import make_inputs

NAMES = [
    "triangular",
    "symmetric",
    "index_as_float",
    "mask",
    "probabilities",
    "logits_0_10",
    "sorted",
    "plain",
    "one_to_two",
    "int_index",
    "scalar",
]


class Structured:
    """A task module's stand-in whose inputs carry one structure each (NAMES)."""

    def get_inputs(self):
        s = torch.randn(32, 32)
        return [
            torch.triu(torch.randn(64, 64)),
            s + s.T,
            torch.randint(0, 10, (100,)).float(),
            (torch.rand(50, 50) > 0.5).float(),
            torch.softmax(torch.randn(8, 20), dim=-1),
            torch.rand(16, 100) * 10,
            torch.sort(torch.randn(10, 50), dim=-1).values,
            torch.randn(100, 100),
            torch.rand(30, 30) + 1,
            torch.randint(0, 5, (7,)),
            3,
        ]


class DeclaredReal(Structured):
    JUDGE_OPTIONS = {"input_domain": "real"}


def _masks(task) -> dict[str, dict[str, str]]:
    masks = contract.probe_inputs(task, 11, "cpu")["masks"]
    return {name: {d: m[i] for d, m in masks.items()} for i, name in enumerate(NAMES)}


def test_invariants_are_read_off_the_draws():
    invariants = contract.probe_inputs(Structured(), 11, "cpu")["invariants"]
    props = {name: set(inv["props"]) if inv else None for name, inv in zip(NAMES, invariants)}
    assert "symmetric" in props["symmetric"]
    assert {"integer", "discrete", "nonnegative"} <= props["index_as_float"]
    assert {"integer", "discrete"} <= props["mask"]
    assert "rows_sum_to_one" in props["probabilities"]
    assert "ascending" in props["sorted"]
    assert props["plain"] == set()
    assert props["int_index"] is None and props["scalar"] is None  # never transformed


def test_transforms_touch_only_inputs_whose_invariants_they_keep():
    masks = _masks(Structured())
    for name in ("symmetric", "index_as_float", "mask", "probabilities", "sorted", "int_index"):
        assert set(masks[name].values()) == {"0"}, name
    # Zeros stay zeros (triangular), values stay in the draws' range (logits in [0, 10]).
    for name in ("triangular", "plain", "logits_0_10"):
        assert set(masks[name].values()) == {"1"}, name
    # [1, 2]: only a redraw within the range keeps it; shrinking multipliers leave it.
    assert masks["one_to_two"] == {"uniform": "1", "heavy_tailed": "0", "wide_range": "0"}


def test_trial_inputs_keep_the_structure():
    masks = contract.probe_inputs(Structured(), 11, "cpu")["masks"]
    for name in ("uniform", "heavy_tailed", "wide_range"):
        spec = contract.trial_distribution(name, masks)
        x = make_inputs(Structured(), 99, "cpu", spec)
        o = make_inputs(Structured(), 99, "cpu", "as_is")
        assert torch.equal(x[0], torch.triu(x[0])) and not torch.equal(x[0], o[0])
        assert torch.equal(x[1], x[1].T)
        assert x[5].min() >= 0 and x[5].max() <= 10
        for i in (1, 2, 3, 4, 6, 9):
            assert torch.equal(x[i], o[i])


def test_a_task_may_declare_its_inputs_real_or_as_is():
    masks = _masks(DeclaredReal())
    assert set(masks["plain"].values()) == {"r"}
    assert set(masks["one_to_two"].values()) == {"r"}
    assert set(masks["symmetric"].values()) == {"0"}  # structure still holds
    x = make_inputs(DeclaredReal(), 3, "cpu", "wide_range@" + "0" * 7 + "r")
    assert x[7].abs().max() > 10 * make_inputs(DeclaredReal(), 3, "cpu", "as_is")[7].abs().max()

    class AsIs(Structured):
        JUDGE_OPTIONS = {"input_domain": ["as_is"] + ["observed"] * 10}

    masks = _masks(AsIs())
    assert set(masks["triangular"].values()) == {"0"} and masks["plain"]["uniform"] == "1"


@pytest.mark.parametrize("value", ["huge", ["real"], 3])
def test_a_malformed_domain_is_refused(value):
    class Bad(Structured):
        JUDGE_OPTIONS = {"input_domain": value}

    with pytest.raises(ValueError, match="input_domain"):
        contract.probe_inputs(Bad(), 1, "cpu")


def test_trial_distribution_spells_the_mask():
    assert contract.trial_distribution("as_is", {"uniform": "1"}) == "as_is"
    assert contract.trial_distribution("uniform", None) == "uniform"
    assert contract.trial_distribution("uniform", {"uniform": "10"}) == "uniform@10"
    assert contract.trial_distribution("uniform", {"uniform": "00"}) == "as_is"


def test_accumulation_units_count_the_ops():
    class Chain(torch.nn.Module):
        def forward(self, a, b):
            return torch.exp(a @ b).sum(dim=-1)

    a, b = torch.randn(4, 256, dtype=torch.float64), torch.randn(256, 64, dtype=torch.float64)
    units = contract.accumulation_units(Chain(), [a, b])
    # 4 sqrt(256 + 64) for the matmul and the sum, 16 for exp.
    assert units == pytest.approx(4 * (256 + 64) ** 0.5 + 16)


def test_magnitudes_are_the_sums_of_absolute_terms():
    class Dot(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64))

        def forward(self, x):
            return (x * self.w).sum()

    x = torch.tensor([-1.0, 1.0, 1.0])
    assert contract.magnitudes(Dot(), [x]) == [6.0]
