"""JudgeConfig.fast_worker_start's default: $CUDA_GYM_FAST_WORKER_START, else on for CUDA only."""

import dataclasses

import pytest

from cuda_gym.errors import ConfigError
from cuda_gym.judge import JudgeConfig
from cuda_gym.judge.config import FAST_WORKER_START_ENV


@pytest.mark.parametrize(
    ("value", "cpu", "cuda"),
    [
        (None, False, True),
        ("", False, True),
        ("0", False, False),
        ("off", False, False),
        ("1", True, True),
        ("TRUE", True, True),
    ],
)
def test_the_default_follows_the_environment_then_the_device(monkeypatch, value, cpu, cuda):
    if value is None:
        monkeypatch.delenv(FAST_WORKER_START_ENV, raising=False)
    else:
        monkeypatch.setenv(FAST_WORKER_START_ENV, value)
    assert JudgeConfig(device="cpu").forks_workers is cpu
    assert JudgeConfig(device="cuda").forks_workers is cuda
    # A value set in code wins over the environment and the device.
    for device in ("cpu", "cuda"):
        for chosen in (True, False):
            assert JudgeConfig(device=device, fast_worker_start=chosen).forks_workers is chosen


def test_the_default_is_decided_for_the_device_the_config_ends_up_with(monkeypatch):
    # The env resolves "auto" by replacing the device of the user's JudgeConfig: a default
    # left unset follows the new device.
    monkeypatch.delenv(FAST_WORKER_START_ENV, raising=False)
    config = dataclasses.replace(JudgeConfig(), device="cuda")
    assert config.fast_worker_start is None and config.forks_workers is True


def test_a_value_that_is_not_a_switch_is_refused(monkeypatch):
    monkeypatch.setenv(FAST_WORKER_START_ENV, "sometimes")
    with pytest.raises(ConfigError, match="CUDA_GYM_FAST_WORKER_START must be 1 or 0"):
        JudgeConfig(device="cpu")
