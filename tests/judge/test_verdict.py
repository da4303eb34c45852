import pytest

from cuda_gym.judge import milestone_reward


@pytest.mark.parametrize(
    ("correct", "eager", "compile_", "expected"),
    [
        (False, 10.0, 10.0, -1.0),
        (True, None, None, 1.0),
        (True, 1.0, 1.0, 1.0),
        (True, 1.05, 2.0, 1.0),  # exactly 5 % is not "more than 5 %"
        (True, 1.06, 1.0, 2.0),
        (True, 1.06, None, 2.0),
        (True, 1.06, 1.051, 3.0),
        (True, 0.5, 3.0, 1.0),  # beating compile alone earns nothing extra
    ],
)
def test_milestone_reward(correct, eager, compile_, expected):
    assert milestone_reward(correct, eager, compile_) == expected


def test_milestone_reward_margin_is_configurable():
    assert milestone_reward(True, 1.2, 1.2, margin=0.25) == 1.0
    assert milestone_reward(True, 1.3, 1.3, margin=0.25) == 3.0
