import numpy as np
import pytest
import torch

from cuda_gym.synth.builder import PROFILES, Builder
from cuda_gym.synth.catalogue import FAMILIES, catalogue, family_counts, get_op
from cuda_gym.tasks import task_from_string

ISSUE_FAMILIES = set(FAMILIES) - {"dropout"}


def test_at_least_80_usable_operators_in_every_family():
    usable = [op for op in catalogue() if not op.stochastic]
    assert len(usable) >= 80
    assert len({op.name for op in catalogue()}) == len(catalogue())
    counts = family_counts()
    assert all(counts[f] > 0 for f in ISSUE_FAMILIES)
    names = {op.name for op in catalogue()}
    for required in (
        "nn.Conv1d",
        "nn.Conv3d",
        "nn.ConvTranspose2d",
        "nn.Linear",
        "torch.cumsum",
        "F.scaled_dot_product_attention",
        "nn.LayerNorm",
        "nn.Softmax",
    ):
        assert required in names


def test_stochastic_flags():
    assert get_op("nn.Dropout").stochastic and get_op("nn.RReLU").stochastic
    assert get_op("F.gumbel_softmax").stochastic
    assert not get_op("nn.Conv2d").stochastic and not get_op("torch.exp").stochastic
    with pytest.raises(KeyError):
        get_op("nn.NoSuchOp")


def _run_single(op, rank, seed):
    rng = np.random.default_rng(seed)
    b = Builder((PROFILES["cpu"], PROFILES["cpu"]))
    b.begin(rank, rng)
    if not op.rule(b, rng):
        return None
    b.consts["batch_size"] = [4, 4]
    source = b.render(f"single {op.name}", with_cpu_sizes=False)
    task = task_from_string(source, "single")
    ns = {}
    exec(compile(task.source, "single", "exec"), ns)
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]())
    with torch.no_grad():
        return model(*ns["get_inputs"]())


@pytest.mark.parametrize("op", catalogue(), ids=lambda op: op.name)
def test_every_operator_builds_a_task_that_runs(op):
    ran = False
    for rank in op.ranks:
        if rank < 2:
            continue
        for seed in range(6):
            out = _run_single(op, rank, seed)
            if out is not None:
                assert isinstance(out, torch.Tensor)
                ran = True
                break
    assert ran, f"{op.name} never applied"
