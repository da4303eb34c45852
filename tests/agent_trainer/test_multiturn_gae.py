"""Multi-turn GAE: advantages over the agent's own tokens, checked against hand-computed episodes.

OpenRLHF's original method is taken from the installed source (its function body, run as is)
to show the bias the patch removes; importing its module needs peft, which a CPU-only test
environment may lack, so the install test skips there.
"""

import ast
import importlib
import importlib.util
import inspect

import pytest
import torch

from agent_trainer.multiturn_gae import EXPECTED_PARAMS, SETUP_HOOK, install, masked_gae
from agent_trainer.openrlhf_main import ray_runtime_env

GAMMA, LAMBD = 1.0, 0.95


def openrlhf_gae():
    """OpenRLHF 0.11.2's `get_advantages_and_returns`, compiled from its installed source."""
    spec = importlib.util.find_spec("openrlhf.trainer.ppo_utils.experience_maker")
    if spec is None:
        pytest.skip("openrlhf is not installed")
    tree = ast.parse(open(spec.origin).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "get_advantages_and_returns":
            node.decorator_list = []
            namespace = {"torch": torch, "Tuple": tuple}
            exec(compile(ast.Module([node], []), spec.origin, "exec"), namespace)
            return namespace["get_advantages_and_returns"]
    raise AssertionError("OpenRLHF has no get_advantages_and_returns")


def episode(turns, feedback, padding=0):
    """values, rewards, mask for turns of (values, final reward) with feedback tokens between."""
    values, rewards, mask = [], [], []
    for i, turn_values in enumerate(turns):
        if i:
            values += [0.0] * feedback
            rewards += [0.0] * feedback
            mask += [0] * feedback
        values += turn_values
        rewards += [0.0] * len(turn_values)
        mask += [1] * len(turn_values)
    rewards[len(rewards) - 1] = 2.0  # the terminal reward on the last action token
    values += [0.0] * padding
    rewards += [0.0] * padding
    mask += [0] * padding
    return (torch.tensor([values]), torch.tensor([rewards]), torch.tensor([mask]))


def test_the_issues_episode_turn_one_gets_plus_one_and_a_half():
    # Turn 1: one token, V = 0.5; 500 feedback tokens; turn 2: one token, V = 2.0, reward 2.
    values, rewards, mask = episode([[0.5], [2.0]], feedback=500)
    adv, ret = masked_gae(values, rewards, mask, GAMMA, LAMBD)
    # By hand: A(turn 2) = 2 - 2 = 0; A(turn 1) = 0 + 1 * 2.0 - 0.5 + 0.95 * 0 = 1.5.
    assert adv[0, 0].item() == pytest.approx(1.5)
    assert adv[0, -1].item() == pytest.approx(0.0)
    assert ret[0, 0].item() == pytest.approx(2.0)
    assert torch.all(adv[0, 1:501] == 0)  # feedback tokens get no advantage
    old_adv, old_ret = openrlhf_gae()(None, values, rewards, mask, GAMMA, LAMBD)
    assert old_adv[0, 0].item() == pytest.approx(-0.5)  # the bias the patch removes
    assert old_ret[0, 0].item() == pytest.approx(0.0, abs=1e-6)


def test_a_longer_episode_matches_the_hand_computation():
    values, rewards, mask = episode([[0.2, 0.4, 0.5], [1.0, 2.0]], feedback=7, padding=3)
    adv, ret = masked_gae(values, rewards, mask, GAMMA, LAMBD)
    # Agent tokens only, V = [0.2, 0.4, 0.5, 1.0, 2.0], reward 2 on the last:
    # A5 = 2 - 2 = 0;  A4 = 2.0 - 1.0 + 0.95 * 0 = 1.0;  A3 = 1.0 - 0.5 + 0.95 * 1.0 = 1.45
    # A2 = 0.5 - 0.4 + 0.95 * 1.45 = 1.4775;  A1 = 0.4 - 0.2 + 0.95 * 1.4775 = 1.603625
    expected = [1.603625, 1.4775, 1.45] + [0.0] * 7 + [1.0, 0.0] + [0.0] * 3
    assert adv[0].tolist() == pytest.approx(expected)
    returns = [1.803625, 1.8775, 1.95] + [0.0] * 7 + [2.0, 2.0] + [0.0] * 3
    assert ret[0].tolist() == pytest.approx(returns)


def test_without_feedback_it_equals_openrlhf():
    torch.manual_seed(0)
    values, rewards = torch.randn(3, 12), torch.randn(3, 12)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 9:] = 0  # right padding of a shorter response
    for gamma, lambd in ((1.0, 0.95), (0.99, 1.0), (0.9, 0.5)):
        ours = masked_gae(values, rewards, mask, gamma, lambd)
        theirs = openrlhf_gae()(None, values, rewards, mask, gamma, lambd)
        for a, b in zip(ours, theirs):
            assert torch.allclose(a, b, atol=1e-6)


def test_the_patch_targets_openrlhfs_signature_and_every_ray_worker():
    params = tuple(inspect.signature(openrlhf_gae()).parameters)
    assert params == EXPECTED_PARAMS
    assert ray_runtime_env()["worker_process_setup_hook"] == SETUP_HOOK
    module, _, name = SETUP_HOOK.rpartition(".")
    assert getattr(importlib.import_module(module), name) is install


def test_install_replaces_the_method():
    pytest.importorskip("peft", reason="OpenRLHF's experience maker imports peft")
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

    install()
    install()
    values, rewards, mask = episode([[0.5], [2.0]], feedback=500)
    adv, _ = RemoteExperienceMaker.get_advantages_and_returns(None, values, rewards, mask,
                                                              GAMMA, LAMBD)
    assert adv[0, 0].item() == pytest.approx(1.5)
