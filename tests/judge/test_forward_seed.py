"""The forward seed: what torch's generators hold when a forward pass on a trial's inputs starts."""

import torch

from cuda_gym.judge.inputs import forward_seed, seed_forward


def test_the_forward_seed_is_fixed_per_trial_seed_and_is_not_the_trial_seed():
    seeds = [0, 1, 12345, (1 << 62) - 1]
    derived = [forward_seed(s) for s in seeds]
    assert derived == [forward_seed(s) for s in seeds]
    assert len(set(derived)) == len(seeds)
    assert all(0 <= d < (1 << 62) and d != s for d, s in zip(derived, seeds))


def test_seeding_the_forward_repeats_a_stochastic_forward():
    dropout = torch.nn.Dropout(0.5)
    x = torch.ones(1000)
    seed_forward(forward_seed(7))
    first = dropout(x)
    second = dropout(x)
    seed_forward(forward_seed(7))
    assert torch.equal(dropout(x), first) and not torch.equal(second, first)
    assert torch.initial_seed() == forward_seed(7)
