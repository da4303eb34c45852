import pytest
import torch

from cuda_gym.judge.compare import check_outputs_match, runs_agree


def _t(*values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def test_equal_outputs_match_with_zero_error():
    result = check_outputs_match([[_t(1, 2)]], [[_t(1, 2)]], "kernelbench")
    assert result.correct and result.max_abs_error == 0.0 and result.details == []


def test_difference_inside_tolerance_passes():
    result = check_outputs_match([[_t(1.0)]], [[_t(1.00005)]], "kernelbench")
    assert result.correct
    assert abs(result.max_abs_error - 5e-5) < 1e-6


def test_difference_outside_tolerance_fails_with_location():
    result = check_outputs_match([[_t(1.0, 2.0)]], [[_t(1.0, 2.1)]], "kernelbench")
    assert not result.correct
    assert "trial 0, output 0: 1 of 2 values outside atol=0.0001" in result.details[0]
    assert "flat index 1" in result.details[0]


def test_paper_mode_is_looser():
    assert check_outputs_match([[_t(1.0)]], [[_t(1.005)]], "paper").correct
    assert not check_outputs_match([[_t(1.0)]], [[_t(1.005)]], "kernelbench").correct


def test_shape_dtype_and_count_mismatches_fail():
    assert "shape" in check_outputs_match([[_t(1, 2)]], [[_t(1)]]).details[0]
    wrong_dtype = [[_t(1, 2, dtype=torch.float64)]]
    assert "dtype" in check_outputs_match([[_t(1, 2)]], wrong_dtype).details[0]
    assert "output(s)" in check_outputs_match([[_t(1)]], [[_t(1), _t(1)]]).details[0]
    assert "trials" in check_outputs_match([[_t(1)]], []).details[0]


def test_nan_passes_only_where_the_reference_has_nan():
    nan = float("nan")
    assert check_outputs_match([[_t(nan, 1)]], [[_t(nan, 1)]]).correct
    assert not check_outputs_match([[_t(0, 1)]], [[_t(nan, 1)]]).correct
    assert not check_outputs_match([[_t(nan, 1)]], [[_t(0, 1)]]).correct


def test_tensor_subclass_is_rejected():
    class Sneaky(torch.Tensor):
        pass

    fake = _t(1, 2).as_subclass(Sneaky)
    result = check_outputs_match([[_t(1, 2)]], [[fake]])
    assert not result.correct and "expected a torch.Tensor" in result.details[0]


def _matmul_case(seed=0, k=512):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(64, k, generator=gen)
    b = torch.randn(k, 64, generator=gen)
    ref32 = a @ b
    ref64 = a.double() @ b.double()
    return a, b, ref32, ref64


def test_strict_accepts_an_honest_fp32_reordering():
    a, b, ref32, ref64 = _matmul_case()
    # Same fp32 arithmetic, another summation order: blocked accumulation over k.
    reordered = sum(a[:, i : i + 64] @ b[i : i + 64] for i in range(0, a.shape[1], 64))
    result = check_outputs_match([[ref32]], [[reordered]], "strict", [[ref64]])
    assert result.correct, result.details


@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16])
def test_strict_rejects_reduced_precision_inputs_that_loose_modes_accept(low):
    a, b, ref32, ref64 = _matmul_case()
    downgraded = (a.to(low).float() @ b.to(low).float()).float()
    assert not check_outputs_match([[ref32]], [[downgraded]], "strict", [[ref64]]).correct
    if low == torch.float16:
        rel = (downgraded - ref32).abs().max() / ref32.abs().max()
        assert rel < 1e-2  # a loose tolerance would have let this through


def test_strict_rejects_tf32_like_rounding():
    a, b, ref32, ref64 = _matmul_case()

    def tf32(x):  # keep 10 mantissa bits, as TF32 tensor cores do
        return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)

    result = check_outputs_match([[ref32]], [[tf32(a) @ tf32(b)]], "strict", [[ref64]])
    assert not result.correct and "strict bound" in result.details[0]


def test_strict_rejects_zeros_for_small_valued_outputs():
    logits = 0.1 * torch.randn(8, 16384)
    x, x64 = torch.softmax(logits, dim=-1), torch.softmax(logits.double(), dim=-1)
    assert not check_outputs_match([[x]], [[torch.zeros_like(x)]], "strict", [[x64]]).correct
    assert check_outputs_match([[x]], [[torch.zeros_like(x)]], "paper").correct


def test_strict_an_fp32_overflow_in_the_reference_is_matched_not_an_infinite_bound():
    # fp32 reference inf where float64 is 1e39: the distance between them bounds nothing
    # (red-team round 14: any finite garbage passed with an infinite tolerance).
    exp = torch.tensor([float("inf"), 1.0, 2.0, 3.0])
    ref64 = torch.tensor([1e39, 1.0, 2.0, 3.0], dtype=torch.float64)
    garbage = torch.tensor([0.0, -7e30, 123.0, 5.0])
    assert not check_outputs_match([[exp]], [[garbage]], "strict", [[ref64]]).correct
    honest = torch.tensor([float("inf"), 1.0, 2.0, 3.0])
    assert check_outputs_match([[exp]], [[honest]], "strict", [[ref64]]).correct
    wrong_finite = torch.tensor([float("inf"), 1.0, 2.5, 3.0])
    assert not check_outputs_match([[exp]], [[wrong_finite]], "strict", [[ref64]]).correct
    # A stable kernel that does not overflow where the reference's naive fp32 pass did
    # (NaN from inf / inf) matches fp64 instead: accepted too.
    nan_ref = torch.tensor([float("nan"), 1.0])
    stable = torch.tensor([0.5, 1.0])
    ref64_nan = torch.tensor([0.5, 1.0], dtype=torch.float64)
    assert check_outputs_match([[nan_ref]], [[stable]], "strict", [[ref64_nan]]).correct
    off = torch.tensor([0.9, 1.0])
    assert not check_outputs_match([[nan_ref]], [[off]], "strict", [[ref64_nan]]).correct


def test_strict_without_fp64_falls_back_to_kernelbench_tolerance():
    assert check_outputs_match([[_t(1.0)]], [[_t(1.00005)]], "strict", None).correct


def test_runs_agree_uses_the_judging_tolerance():
    from cuda_gym.judge.compare import runs_agree

    ref = _t(1.0, 2.0)
    assert runs_agree([_t(1.0, 2.0)], [_t(1.0, 2.0)], "kernelbench", [ref])
    assert runs_agree([_t(1.0, 2.0)], [_t(1.00001, 2.0)], "kernelbench", [ref])
    assert not runs_agree([_t(1.0, 2.0)], [_t(1.1, 2.0)], "kernelbench", [ref])
    # Two equally wrong runs agree: wrongness is the comparison's business, not determinism's.
    assert runs_agree([_t(5.0, 5.0)], [_t(5.0, 5.0)], "strict", [ref], [ref.double()])
    nan = float("nan")
    assert runs_agree([_t(nan, 1.0)], [_t(nan, 1.0)], "kernelbench", [ref])
    assert not runs_agree([_t(nan, 1.0)], [_t(0.0, 1.0)], "kernelbench", [ref])


@pytest.mark.parametrize("mode", ["strict", "kernelbench", "paper"])
def test_comparing_in_chunks_gives_the_same_verdict_and_worst_value(monkeypatch, mode):
    from cuda_gym.judge import compare

    torch.manual_seed(0)
    ref64 = torch.randn(7, 53, dtype=torch.float64)
    exp = ref64.float()
    act = exp.clone()
    act[3, 11] += 0.5  # the worst value
    act[5, 40] += 0.25
    act[0, 0] = float("nan")
    whole = check_outputs_match([[exp]], [[act]], mode, [[ref64]])
    monkeypatch.setattr(compare, "CHUNK", 16)
    chunked = check_outputs_match([[exp]], [[act]], mode, [[ref64]])
    assert not whole.correct and not chunked.correct
    assert chunked.details == whole.details
    act[0, 0] = exp[0, 0]
    monkeypatch.setattr(compare, "CHUNK", 1 << 24)
    whole = check_outputs_match([[exp]], [[act]], mode, [[ref64]])
    monkeypatch.setattr(compare, "CHUNK", 16)
    chunked = check_outputs_match([[exp]], [[act]], mode, [[ref64]])
    assert chunked.details == whole.details and "flat index 170" in chunked.details[0]
    assert chunked.max_abs_error == whole.max_abs_error
    assert chunked.max_rel_error == whole.max_rel_error


def test_runs_agree_in_chunks(monkeypatch):
    from cuda_gym.judge import compare

    monkeypatch.setattr(compare, "CHUNK", 8)
    exp = torch.linspace(-1, 1, 100)
    other = exp.clone()
    assert runs_agree([exp], [other], "paper", [exp])
    other[97] += 1.0  # in the last chunk only
    assert not runs_agree([exp], [other], "paper", [exp])


@pytest.mark.parametrize("mode", ["strict", "kernelbench"])
def test_trials_checked_one_at_a_time_add_up_with_their_numbers(mode):
    exp, act = [[_t(1.0)], [_t(2.0)]], [[_t(1.0)], [_t(2.5)]]
    exp64 = [[x.double() for x in trial] for trial in exp]
    together = check_outputs_match(exp, act, mode, exp64)
    one_by_one = check_outputs_match(exp[:1], act[:1], mode, exp64[:1])
    check_outputs_match(exp[1:], act[1:], mode, exp64[1:], into=one_by_one, first_trial=1)
    assert one_by_one == together and not together.correct
    assert together.details[0].startswith("trial 1, output 0")
