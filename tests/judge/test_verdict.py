import json
import re
from pathlib import Path

import pytest

from cuda_gym import judge
from cuda_gym.judge import Flag, Verdict, ViolationKind, milestone_reward
from cuda_gym.judge.verdict import format_violation, violation_code, violation_kind


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


def test_violations_read_back_as_their_kind_and_code():
    fallback = format_violation(ViolationKind.TORCH_FALLBACK, "aten.mm called inside forward")
    static = format_violation(ViolationKind.STATIC, "line 3: no try", rule="try_except")
    assert fallback == "torch_fallback: aten.mm called inside forward"
    assert static == "static:try_except: line 3: no try"
    assert violation_kind(fallback) is ViolationKind.TORCH_FALLBACK
    assert violation_kind(static) is ViolationKind.STATIC
    assert violation_code(fallback) == "torch_fallback"
    assert violation_code(static) == "static:try_except"
    assert violation_kind("something else: x") is None and violation_code("no colon") is None
    verdict = Verdict(violations=[fallback])
    assert verdict.has_violation(ViolationKind.OUTPUT_TYPE, ViolationKind.TORCH_FALLBACK)
    assert not verdict.has_violation(ViolationKind.STATIC)


def test_the_runner_writes_only_known_violation_kinds():
    # The runner imports nothing of cuda_gym: its kinds are literal text.
    source = (Path(judge.__file__).parent / "runner.py").read_text()
    written = set(re.findall(r'f?"([a-z_]+): ', source))
    kinds = {"torch_fallback", "async_work", "output_type", "output_alias", "no_own_kernel"}
    assert written == kinds
    assert all(violation_kind(f"{kind}: x") is not None for kind in written)


def test_flags_serialise_with_plain_string_keys_and_old_records_load():
    verdict = Verdict(tolerance_mode="paper")
    verdict.flags[Flag.SIDE_WORK] = {"flush_ms": 0.1}
    data = verdict.to_dict()
    assert [type(k) for k in data["flags"]] == [str] and data["flags"] == {
        "side_work": {"flush_ms": 0.1}
    }
    assert json.loads(json.dumps(data))["flags"] == {"side_work": {"flush_ms": 0.1}}
    assert Verdict.from_dict(data).flags[Flag.SIDE_WORK] == {"flush_ms": 0.1}
    old = {k: v for k, v in data.items() if k != "tolerance_mode"} | {"mode": "kernelbench"}
    assert Verdict.from_dict(old).tolerance_mode == "kernelbench"


def test_a_speedup_inside_the_timing_noise_earns_no_milestone():
    assert milestone_reward(True, 1.2, 1.2, noise={"eager": 0.3, "compile": 0.01}) == 1.0
    assert milestone_reward(True, 1.4, 1.2, noise={"eager": 0.3, "compile": 0.01}) == 3.0
    assert milestone_reward(True, 1.4, 1.2, noise={"eager": 0.3, "compile": 0.25}) == 2.0
    assert milestone_reward(True, 1.06, 1.06, noise={"eager": 0.01}) == 3.0  # the margin rules
    assert milestone_reward(True, 1.06, 1.06, noise=None) == 3.0


def test_the_cpu_retimes_eager_with_every_candidate_and_a_gpu_nothing():
    from cuda_gym.judge import JudgeConfig

    assert JudgeConfig(device="cpu").resolved_retime_baselines == ("eager",)
    assert JudgeConfig(device="cuda").resolved_retime_baselines == ()
    assert JudgeConfig(device="cpu", baselines=("compile",)).resolved_retime_baselines == ()
    both = JudgeConfig(device="cuda", retime_baselines=("eager", "compile"))
    assert both.resolved_retime_baselines == ("eager", "compile")


def test_timing_noise_shrinks_with_more_calls():
    from cuda_gym.judge.judge import _timing_noise

    few = _timing_noise(0.3, 5, {"spread": 0.3, "runs": 5})
    many = _timing_noise(0.3, 30, {"spread": 0.3, "runs": 30})
    assert 0.18 < few < 0.2 and 0.07 < many < 0.08
    assert _timing_noise(0.02, 25, {"spread": 0.02, "runs": 25}) < 0.01  # a GPU: the margin rules
    assert _timing_noise(0.1, 20, {}) > 0  # a baseline cached without its spread
