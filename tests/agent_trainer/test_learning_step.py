"""The learning-step benchmark on the CPU: real rewards of both signs, a real gradient step."""

import json

import pytest

from benchmarks.learning_step import kernel_files, main, scripts


def test_the_buggy_kernel_differs_from_the_demos_on_both_devices():
    for device in ("cpu", "cuda"):
        honest, buggy = kernel_files(device, False), kernel_files(device, True)
        assert honest.keys() == buggy.keys() and honest != buggy
        assert scripts(device)["empty"][0].count("submit") == 1


@pytest.mark.slow
def test_a_grpo_step_on_mixed_rewards_changes_the_model(tmp_path):
    out = tmp_path / "learning_step.json"
    summary = main(["--device", "cpu", "--fast-judge", "--out", str(out)])
    assert json.loads(out.read_text()) == summary
    assert summary["rollout_kinds"] == ["honest", "empty"]
    rewards = summary["episode_rewards_last_step"]
    assert max(rewards) >= 1.0 and min(rewards) == -1.0  # the honest one is judged correct
    assert summary["reward_std"][0] > 0 and summary["loss"][0] != 0.0
    assert summary["grad_norm"][0] > 0
    assert summary["parameters_changed"] == summary["parameters"] > 0
