"""JudgeConfig.fast_worker_start's default comes from $CUDA_GYM_FAST_WORKER_START."""

import pytest

from cuda_gym.errors import ConfigError
from cuda_gym.judge import JudgeConfig
from cuda_gym.judge.config import FAST_WORKER_START_ENV


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, False), ("", False), ("0", False), ("off", False), ("1", True), ("TRUE", True)],
)
def test_the_default_follows_the_environment(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(FAST_WORKER_START_ENV, raising=False)
    else:
        monkeypatch.setenv(FAST_WORKER_START_ENV, value)
    assert JudgeConfig(device="cpu").fast_worker_start is expected
    # A value set in code wins over the environment.
    assert JudgeConfig(device="cpu", fast_worker_start=not expected).fast_worker_start is (
        not expected
    )


def test_a_value_that_is_not_a_switch_is_refused(monkeypatch):
    monkeypatch.setenv(FAST_WORKER_START_ENV, "sometimes")
    with pytest.raises(ConfigError, match="CUDA_GYM_FAST_WORKER_START must be 1 or 0"):
        JudgeConfig(device="cpu")
