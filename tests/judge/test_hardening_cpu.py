"""The hardened judge on the CPU device: exploits are rejected for the right reason."""

import contextlib
import dataclasses
import re

import pytest

from cuda_gym.demo import MODEL_NEW
from cuda_gym.judge import Judge
from cuda_gym.judge.verdict import violation_kind
from cuda_gym.tasks import builtin_task, task_from_string
from tests.conftest import TEST_JUDGE
from tests.judge.exploit_kernels import PYTHON_SOURCE, SOURCE
from tests.solutions import TASK_ID, model_new_calling

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def task():
    return builtin_task(TASK_ID).for_device("cpu")


def judge_for(**kwargs):
    """The tests' judge (its baselines shared with the other CPU tests), with changes."""
    return Judge(dataclasses.replace(TEST_JUDGE, **kwargs))


# Kernels that reach Python's objects (PYTHON_SOURCE): refused statically, judged behind.
PYTHON_FUNCTIONS = ("aten_fallback",)


def exploit(tmp_path, function):
    (tmp_path / "kernels").mkdir(parents=True, exist_ok=True)
    (tmp_path / "kernels" / "exploits.cpp").write_text(SOURCE)
    if function in PYTHON_FUNCTIONS:
        (tmp_path / "kernels" / "python_access.cpp").write_text(PYTHON_SOURCE)
    (tmp_path / "model_new.py").write_text(model_new_calling(function))
    return tmp_path


def reasons(verdict):
    return [str(violation_kind(v)) for v in verdict.violations]


def test_honest_kernel_passes_every_check(task, tmp_path):
    verdict = judge_for().evaluate(task, exploit(tmp_path, "honest"))
    assert verdict.verdict == "accept", verdict.error
    assert verdict.checks == {
        "static": True,
        "fallback_ban": True,
        "outputs_plain": True,
        "inputs_unmutated": True,
        "correct": True,
        "deterministic": True,
        "timing_recheck": True,
    }
    assert verdict.tolerance_mode == "strict" and verdict.violations == []


def test_python_level_torch_fallback_is_refused(task, tmp_path):
    (tmp_path / "model_new.py").write_text(
        MODEL_NEW.replace(
            "return kernels_ext.gated_multiply(x, gate, self.gate_bias)",
            "return x * torch.sigmoid(gate + self.gate_bias)",
        ).replace("import kernels_ext\n", "")
    )
    verdict = judge_for().evaluate(task, tmp_path, timing=False)
    assert verdict.verdict == "reject" and reasons(verdict)[0] == "torch_fallback"
    assert "aten.add.Tensor" in verdict.violations[0]


@pytest.mark.parametrize(
    ("function", "reason"),
    [
        ("aten_fallback", "torch_fallback"),
        ("mutate_input", "input_mutated"),
        ("alias_input", "output_alias"),
        ("flaky", "nondeterministic"),
    ],
)
def test_exploit_is_rejected_for_its_reason(task, tmp_path, function, reason):
    from benchmarks.case_suite import static_checks_skipped

    root = exploit(tmp_path, function)
    if function in PYTHON_FUNCTIONS:
        assert "python_from_native" in judge_for().evaluate(task, root).violations[0]
    with static_checks_skipped() if function in PYTHON_FUNCTIONS else contextlib.nullcontext():
        verdict = judge_for().evaluate(task, root, timing=False)
    assert verdict.verdict == "reject" and verdict.reward == -1
    assert reason in reasons(verdict), verdict.violations


def test_wrong_outputs_inside_the_timing_loop_are_caught(task, tmp_path):
    verdict = judge_for().evaluate(task, exploit(tmp_path, "lazy_in_timing"))
    assert verdict.verdict == "reject" and "timing_recheck" in reasons(verdict)
    assert verdict.checks["correct"] is True and verdict.checks["timing_recheck"] is False


def test_precision_downgrade_fails_strict_but_passes_paper(task, tmp_path):
    solution = exploit(tmp_path, "half_inputs")
    strict = judge_for().evaluate(task, solution, timing=False)
    assert strict.verdict == "reject" and "strict bound" in strict.error
    paper = judge_for(tolerance_mode="paper").evaluate(task, solution, timing=False)
    assert paper.verdict == "accept" and paper.tolerance_mode == "paper"


def test_extra_input_distributions_catch_range_shortcuts(task, tmp_path):
    verdict = judge_for(tolerance_mode="kernelbench").evaluate(
        task, exploit(tmp_path, "clamped_gate"), timing=False
    )
    assert verdict.verdict == "reject"
    assert any("trial 2" in d or "trial 3" in d for d in verdict.details)


def test_static_checks_reject_a_try_except_fallback(task, tmp_path):
    (tmp_path / "model_new.py").write_text(
        MODEL_NEW.replace(
            "        return kernels_ext.gated_multiply(x, gate, self.gate_bias)",
            "        try:\n            return kernels_ext.gated_multiply(x, gate, self.gate_bias)\n"
            "        except RuntimeError:\n            return x",
        )
    )
    verdict = judge_for().evaluate(task, tmp_path, timing=False)
    assert verdict.verdict == "reject" and verdict.stage == "static"
    assert reasons(verdict) == ["static"] and "try_except" in verdict.violations[0]


TINY_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 1e-6

def get_inputs():
    return [torch.randn(64, 64)]

def get_init_inputs():
    return []
"""


def test_degenerate_tasks_are_flagged_by_the_probe():
    probe = judge_for().probe_task(task_from_string(TINY_TASK, "tiny").for_device("cpu"))
    assert {"zeros", "mean"} <= set(probe["degenerate"]["paper"])
    assert probe["degenerate"]["strict"] == []
    assert probe["fp64_ok"] is True
    assert probe["distributions"] == ["as_is", "uniform", "heavy_tailed", "wide_range"]
    softmax = judge_for().probe_task(builtin_task("row_softmax").for_device("cpu"))
    assert softmax["degenerate"] == {"strict": [], "kernelbench": [], "paper": []}


@pytest.mark.parametrize(
    ("kind", "check"), [("speedup", lambda r: r > 0), ("log_speedup", lambda r: -1 <= r <= 3)]
)
def test_alternative_rewards(task, tmp_path, kind, check):
    verdict = judge_for(reward=kind).evaluate(task, exploit(tmp_path, "honest"))
    assert verdict.reward_kind == kind and check(verdict.reward)
    wrong = judge_for(reward=kind).evaluate(task, exploit(tmp_path / "w", "half_inputs"))
    assert wrong.reward == -1


LINEAR_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 16)

    def forward(self, x):
        return torch.relu(self.linear(x))

def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return []
"""

VENDOR_SOLUTION = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 16)

    def forward(self, x):
        y = torch.mm(x, self.linear.weight.t())
        return y
"""


def test_vendor_gemm_is_allowed_only_when_the_task_opts_in(tmp_path):
    (tmp_path / "model_new.py").write_text(VENDOR_SOLUTION)
    plain = task_from_string(LINEAR_TASK, "linear").for_device("cpu")
    verdict = judge_for().evaluate(plain, tmp_path, timing=False)
    assert verdict.violations[0].startswith("torch_fallback: aten.mm.default")
    opted = task_from_string(
        LINEAR_TASK + "\nJUDGE_OPTIONS = {'allow_vendor_libraries': True}\n", "linear_opt"
    ).for_device("cpu")
    verdict = judge_for().evaluate(opted, tmp_path, timing=False)
    # The GEMM is allowed now; the solution is still wrong (no bias, no relu).
    assert verdict.violations == [] and verdict.checks["fallback_ban"] is True
    assert verdict.checks["correct"] is False


@pytest.mark.parametrize("where", ["import", "forward"])
def test_candidate_code_cannot_read_a_trial_seed_from_torch(task, tmp_path, monkeypatch, where):
    # The trial seeds draw the inputs; make_inputs seeds torch with each in turn. What candidate
    # code can read from torch's generators, at import or in forward, is never one of them. The
    # candidate reports what it read in an exception's message, which the verdict shows.
    import cuda_gym.judge.judge as judge_module

    drawn = []

    def randbits(k):
        drawn.append(1000 + len(drawn))
        return drawn[-1]

    monkeypatch.setattr(judge_module.secrets, "randbits", randbits)
    tell = "raise RuntimeError(f'initial seed <{torch.initial_seed()}>')"
    source = model_new_calling("honest")
    if where == "import":
        source = source.replace("import kernels_ext\n", f"import kernels_ext\n{tell}\n")
    else:
        source = source.replace(
            "        return kernels_ext", f"        {tell}\n        return kernels_ext"
        )
    assert tell in source
    (tmp_path / "model_new.py").write_text(source)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "exploits.cpp").write_text(SOURCE)
    verdict = judge_for().evaluate(task, tmp_path, timing=False)
    read = re.search(r"initial seed <(\d+)>", verdict.error or "")
    assert read, (verdict.error, verdict.violations)
    trial_seeds = set(drawn[:-1])  # the last draw is the init seed
    assert len(trial_seeds) >= 3 and int(read.group(1)) not in trial_seeds
