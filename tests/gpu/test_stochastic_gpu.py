"""A stochastic reference (training-mode dropout) judged as its own candidate on a real GPU.
Run with: python -m pytest -m gpu"""

import pytest

from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.tasks import task_from_string
from tests.judge.test_reference_as_candidate import DROPOUT_TASK

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("mode", ["strict", "paper"])
def test_dropout_reference_is_its_own_correct_candidate_on_the_gpu(mode):
    # CUDA's dropout draws one mask per forward seed in both processes. Its float64 kernel draws
    # a different mask from the same seed (seen on the H200): the probe finds that the float64
    # pass disagrees and strict mode falls back to 1e-4 around the float32 reference, instead of
    # a bound so wide that trivial answers pass (degenerate_task).
    judge = Judge(JudgeConfig(device="cuda", tolerance_mode=mode, baselines=("eager",)))
    verdict = judge.evaluate_reference_as_candidate(task_from_string(DROPOUT_TASK, "dropout"))
    assert verdict.correct and verdict.verdict == "accept", (verdict.details, verdict.violations)
    assert verdict.checks["deterministic"] and verdict.checks["timing_recheck"]
    assert "bitwise_nondeterministic" not in verdict.flags
    assert "degenerate_task" not in verdict.flags
    if mode == "strict":
        assert verdict.flags.get("fp64_disagrees") is True
