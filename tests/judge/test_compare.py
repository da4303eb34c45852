import torch

from cuda_gym.judge.compare import check_outputs_match


def _t(*values):
    return torch.tensor(values, dtype=torch.float32)


def test_equal_outputs_match_with_zero_error():
    result = check_outputs_match([[_t(1, 2)]], [[_t(1, 2)]], 1e-4, 1e-4)
    assert result.correct and result.max_abs_error == 0.0 and result.details == []


def test_difference_inside_tolerance_passes():
    result = check_outputs_match([[_t(1.0)]], [[_t(1.00005)]], 1e-4, 1e-4)
    assert result.correct
    assert abs(result.max_abs_error - 5e-5) < 1e-6


def test_difference_outside_tolerance_fails_with_location():
    result = check_outputs_match([[_t(1.0, 2.0)]], [[_t(1.0, 2.1)]], 1e-4, 1e-4)
    assert not result.correct
    assert "trial 0, output 0: 1 of 2 values outside" in result.details[0]
    assert "flat index 1" in result.details[0]


def test_shape_dtype_and_count_mismatches_fail():
    assert "shape" in check_outputs_match([[_t(1, 2)]], [[_t(1)]], 1, 1).details[0]
    wrong_dtype = [[torch.tensor([1, 2], dtype=torch.float64)]]
    assert "dtype" in check_outputs_match([[_t(1, 2)]], wrong_dtype, 1, 1).details[0]
    assert "output(s)" in check_outputs_match([[_t(1)]], [[_t(1), _t(1)]], 1, 1).details[0]
    assert "trials" in check_outputs_match([[_t(1)]], [], 1, 1).details[0]


def test_nan_passes_only_where_the_reference_has_nan():
    nan = float("nan")
    assert check_outputs_match([[_t(nan, 1)]], [[_t(nan, 1)]], 1e-4, 1e-4).correct
    assert not check_outputs_match([[_t(0, 1)]], [[_t(nan, 1)]], 1e-4, 1e-4).correct
    assert not check_outputs_match([[_t(nan, 1)]], [[_t(0, 1)]], 1e-4, 1e-4).correct


def test_tensor_subclass_is_rejected():
    class Sneaky(torch.Tensor):
        pass

    fake = _t(1, 2).as_subclass(Sneaky)
    result = check_outputs_match([[_t(1, 2)]], [[fake]], 1e-4, 1e-4)
    assert not result.correct and "expected a torch.Tensor" in result.details[0]
