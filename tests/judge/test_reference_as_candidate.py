"""The sanity run: the reference judged as its own candidate, with the op ban lifted only there."""

import dataclasses

import pytest

from cuda_gym.config import EnvConfig
from cuda_gym.judge import Judge, JudgeConfig, ViolationKind
from cuda_gym.tasks import task_from_string

pytestmark = pytest.mark.slow

TASK = '''"""Scaled ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super(Model, self).__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return [2.0]
'''

# The same computation submitted as ordinary candidate code: PyTorch ops in forward.
TORCH_CANDIDATE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale
"""


@pytest.fixture(scope="module")
def judge():
    return Judge(JudgeConfig(device="cpu", timed_runs=3, warmup_runs=1, baselines=("eager",)))


def test_reference_as_candidate_is_accepted_near_one(judge):
    verdict = judge.evaluate_reference_as_candidate(task_from_string(TASK, "scaled_relu"))
    assert verdict.correct and verdict.verdict == "accept", verdict.error
    assert verdict.flags["reference_as_candidate"] is True
    assert verdict.checks["static"] is None and verdict.checks["fallback_ban"] is None
    assert verdict.violations == []
    assert verdict.speedup_vs_eager > 0
    assert verdict.flags["numerics"] == {"matmul_allow_tf32": False, "cudnn_allow_tf32": False}


def test_the_same_code_as_a_candidate_is_still_banned(judge, tmp_path):
    (tmp_path / "model_new.py").write_text(TORCH_CANDIDATE)
    verdict = judge.evaluate(task_from_string(TASK, "scaled_relu"), tmp_path, timing=False)
    assert not verdict.correct
    assert verdict.has_violation(ViolationKind.TORCH_FALLBACK)
    assert "reference_as_candidate" not in verdict.flags


def test_no_configuration_can_lift_the_ban():
    names = {f.name for f in dataclasses.fields(JudgeConfig)} | {
        f.name for f in dataclasses.fields(EnvConfig)
    }
    assert not any("ban" in n or "reference" in n for n in names)


# Training-mode dropout (as KernelBench's level-2 66_Matmul_Dropout_Softmax): the reference draws
# its mask in another process than the candidate. Scaled by 10 so that two masks differ far
# beyond any mode's tolerance.
DROPOUT_TASK = '''"""Dropout, then scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.dropout = nn.Dropout(p)

    def forward(self, x):
        return self.dropout(x) * 10.0


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [0.5]
'''


@pytest.mark.parametrize("mode", ["strict", "paper"])
def test_a_stochastic_reference_is_accepted_as_its_own_candidate(mode):
    # Every forward pass on a trial's inputs starts from that trial's forward seed in both
    # processes: the correctness trials, the repeat (no nondeterminism flag) and the timed
    # calls (the timing recheck).
    judge = Judge(
        JudgeConfig(
            device="cpu", timed_runs=3, warmup_runs=1, baselines=("eager",), tolerance_mode=mode
        )
    )
    verdict = judge.evaluate_reference_as_candidate(task_from_string(DROPOUT_TASK, "dropout"))
    assert verdict.correct and verdict.verdict == "accept", (verdict.details, verdict.violations)
    assert verdict.checks["deterministic"] and verdict.checks["timing_recheck"]
    assert "bitwise_nondeterministic" not in verdict.flags
    # The probe's fp32 and fp64 passes draw one mask: the strict bound stays tight.
    assert "degenerate_task" not in verdict.flags
    assert verdict.violations == []


# A float64 pass that computes something else, as CUDA's dropout does: its kernels draw a
# different mask for float64 than for float32 from one seed.
DTYPE_DEPENDENT_TASK = '''"""Scale, differently in float64."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * (3.0 if x.dtype == torch.float64 else 2.0)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''


def test_a_float64_pass_that_disagrees_is_not_used_as_the_strict_reference():
    # Before: the bound from |fp32 - fp64| spanned the outputs, so zeros "matched" (degenerate)
    # and any answer within 8x of it passed. Now strict holds it to 1e-4 around the fp32 output.
    judge = Judge(
        JudgeConfig(
            device="cpu", timed_runs=3, warmup_runs=1, baselines=("eager",), tolerance_mode="strict"
        )
    )
    task = task_from_string(DTYPE_DEPENDENT_TASK, "dtype_dependent")
    assert judge.probe_task(task)["fp64_ok"] is False
    verdict = judge.evaluate_reference_as_candidate(task)
    assert verdict.correct and verdict.verdict == "accept", (verdict.details, verdict.violations)
    assert verdict.flags.get("fp64_disagrees") is True
    assert "degenerate_task" not in verdict.flags


def test_a_judgement_that_probes_its_task_reports_the_probes_time(tmp_path):
    judge = Judge(JudgeConfig(device="cpu", cache_dir=tmp_path, baselines=("eager",)))
    task = task_from_string(TASK, "scaled_relu")
    first = judge.evaluate_reference_as_candidate(task, timing=False)
    assert first.correct, first.error
    assert first.stage_times_s["probe"] > 0 and first.stage_times_s["probe.probe"] > 0
    # The probe is cached from then on: later judgements of the task do not pay for it.
    second = judge.evaluate_reference_as_candidate(task, timing=False)
    assert second.correct and not any(s.startswith("probe") for s in second.stage_times_s)


# get_inputs draws other inputs from the same seed each time (Python's random, never seeded).
UNSEEDED_TASK = TASK.replace("import torch\n", "import random\n\nimport torch\n", 1).replace(
    "return [torch.randn(64, 128)]", "return [torch.randn(64, 128) + random.random()]"
)


@pytest.mark.parametrize("source, by_seed", [(TASK, True), (UNSEEDED_TASK, False)])
def test_rechecked_timed_calls_draw_their_inputs_again_only_where_that_gives_the_same(
    judge, source, by_seed
):
    """A re-checked timed call keeps its outputs on the host and draws its inputs again from
    their seed, unless the task's get_inputs draws other inputs from the same seed: then its
    inputs are kept (drawn again they would be checked against another answer)."""
    verdict = judge.evaluate_reference_as_candidate(task_from_string(source, "scaled_relu"))
    assert verdict.verdict == "accept", verdict.error
    timing = verdict.flags["candidate_timing"]
    assert timing["rechecked_calls"] >= 2 and timing["rechecked_by_seed"] is by_seed
    assert verdict.checks["timing_recheck"] is True
