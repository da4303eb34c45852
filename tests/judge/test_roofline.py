import torch

from cuda_gym.judge.judge import apply_speed_of_light
from cuda_gym.judge.roofline import count_flops, peak_flops, speed_of_light_ms, tensor_bytes
from cuda_gym.judge.verdict import Verdict, compute_reward


def test_flops_and_bytes_of_a_linear_layer():
    model = torch.nn.Linear(64, 32)
    x = torch.randn(16, 64)
    assert count_flops(model, [x]) == 2 * 16 * 64 * 32
    assert tensor_bytes([x, 3, torch.zeros(2, dtype=torch.float64)]) == 16 * 64 * 4 + 16


def test_bound_is_the_slower_of_memory_and_compute():
    assert speed_of_light_ms(4_000_000, 0, 4e12, 67e12) == 1e-3
    assert speed_of_light_ms(0, 67_000_000_000, 4e12, 67e12) == 1.0
    assert speed_of_light_ms(4_000_000, 67_000_000_000, 4e12, None) == 1e-3
    assert peak_flops("NVIDIA H200") == 67e12 and peak_flops("Mystery GPU") is None


def _timed_verdict(candidate_ms, host_ms=None):
    v = Verdict(correct=True)
    v.time_ms = {"candidate": candidate_ms, "eager": 2.0, "compile": 1.0}
    v.speedup_vs_eager, v.speedup_vs_compile = 2.0 / candidate_ms, 1.0 / candidate_ms
    if host_ms is not None:
        v.flags["candidate_host_median_ms"] = host_ms
    return v


def test_faster_than_light_earns_no_speedup_reward():
    v = _timed_verdict(0.01)
    apply_speed_of_light(v, {"sol_ms": 0.5})
    assert v.flags["speed_of_light"] == {"candidate_ms": 0.01, "bound_ms": 0.5}
    assert v.speedup_vs_eager is None and v.speedup_vs_compile is None
    assert compute_reward("milestone", True, v.speedup_vs_eager, v.speedup_vs_compile) == 1.0


def test_plausible_times_are_untouched():
    v = _timed_verdict(0.6)
    apply_speed_of_light(v, {"sol_ms": 0.5})
    assert "speed_of_light" not in v.flags and v.speedup_vs_eager > 3
    apply_speed_of_light(v, None)
    assert "speed_of_light" not in v.flags


def test_event_time_far_below_host_time_is_flagged():
    v = _timed_verdict(0.2, host_ms=1.0)
    apply_speed_of_light(v, None)
    assert v.flags["timing_mismatch"] == {"event_ms": 0.2, "host_ms": 1.0}
