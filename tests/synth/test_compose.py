from collections import Counter

import torch

from cuda_gym.synth.compose import compose
from cuda_gym.synth.config import SynthConfig
from cuda_gym.tasks import task_from_string


def test_same_seed_and_index_give_the_same_task():
    cfg = SynthConfig(seed=7)
    assert compose(3, cfg).source() == compose(3, cfg).source()
    assert compose(3, cfg).source() != compose(3, SynthConfig(seed=8)).source()


def test_default_chain_lengths_are_mostly_two():
    cfg = SynthConfig(seed=1)
    lengths = Counter(compose(i, cfg).chain_length for i in range(200))
    assert set(lengths) <= {1, 2, 3, 4, 5}
    assert lengths[2] / 200 > 0.7


def test_chain_length_distribution_is_configurable():
    cfg = SynthConfig(seed=2, chain_lengths={3: 1.0})
    assert {compose(i, cfg).chain_length for i in range(20)} == {3}


def test_cuda_tasks_carry_cpu_sizes_that_run():
    cfg = SynthConfig(seed=4, device="cuda")
    for i in range(10):
        cand = compose(i, cfg)
        task = task_from_string(cand.source(), f"t{i}")
        assert task.description.startswith("Synthesised task")
        if "CPU_SIZES" not in task.source:
            continue
        cpu = task.for_device("cpu")
        assert "CPU_SIZES" not in cpu.source
        ns = {}
        exec(compile(cpu.source, "t", "exec"), ns)
        with torch.no_grad():
            ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]())
