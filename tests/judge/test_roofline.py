import pytest
import torch

from cuda_gym.judge.judge import _check_timing_integrity, apply_speed_of_light
from cuda_gym.judge.protocol import KernelSummary, TimingStats
from cuda_gym.judge.roofline import (
    count_flops,
    peak_bandwidth,
    peak_flops,
    speed_of_light_ms,
    tensor_bytes,
)
from cuda_gym.judge.timing import Timer, kernel_origin
from cuda_gym.judge.verdict import Verdict, ViolationKind, compute_reward, violation_kind


def test_flops_and_bytes_of_a_linear_layer():
    model = torch.nn.Linear(64, 32)
    x = torch.randn(16, 64)
    assert count_flops(model, [x]) == 2 * 16 * 64 * 32
    assert tensor_bytes([x, 3, torch.zeros(2, dtype=torch.float64)]) == 16 * 64 * 4 + 16


def test_convolutions_add_no_flops_to_the_bound():
    # cuDNN's Winograd and FFT algorithms beat the direct count: on the H200 PyTorch's own
    # transposed convolution (level 1's 69_conv_transposed_2D) ran in 4.77 ms against a 7.69 ms
    # bound from it. The matmul after the convolution still counts.
    conv = torch.nn.ConvTranspose2d(4, 8, (3, 5))
    linear = torch.nn.Linear(8 * 10 * 12, 3)
    model = torch.nn.Sequential(conv, torch.nn.Flatten(), linear)
    x = torch.randn(2, 4, 8, 8)
    assert count_flops(model, [x]) == 2 * 2 * (8 * 10 * 12) * 3
    assert count_flops(torch.nn.Conv2d(4, 8, 3), [x]) == 0


def test_bound_is_the_slower_of_memory_and_compute():
    assert speed_of_light_ms(4_000_000, 0, 4e12, 67e12) == 1e-3
    assert speed_of_light_ms(0, 67_000_000_000, 4e12, 67e12) == 1.0
    assert speed_of_light_ms(4_000_000, 67_000_000_000, 4e12, None) == 1e-3
    assert peak_flops("NVIDIA H200") == 67e12 and peak_flops("Mystery GPU") is None


def test_eager_matrix_vector_product_on_the_h200_is_not_faster_than_light():
    # level1/4_Matrix_vector_multiplication_: 8 GiB read, PyTorch's eager time 2.31 ms on the
    # H200. The bound from the nominal 4.8 TB/s (1.79 ms) leaves it unflagged; the bound from
    # the copy bandwidth measured while other judgements shared the GPU (3.03 ms) flagged it.
    bytes_moved = 8 * 2**30 + 4 * 2**20
    flops = 2 * 2**31
    bound_ms = speed_of_light_ms(
        bytes_moved, flops, peak_bandwidth("NVIDIA H200"), peak_flops("NVIDIA H200")
    )
    assert 1.7 < bound_ms < 1.9
    v = _timed_verdict(2.31)
    apply_speed_of_light(v, {"sol_ms": bound_ms})
    assert "speed_of_light" not in v.flags and v.speedup_vs_eager is not None
    assert peak_bandwidth("NVIDIA H100 80GB HBM3") == 3.9e12
    assert peak_bandwidth("Mystery GPU") is None


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


def test_gpu_time_mostly_in_pytorch_kernels_is_a_violation():
    kernels = _kernels(0.1, ["void at::native::elementwise_kernel<128, 2>"])
    v = _timed_verdict(0.6)
    _check_timing_integrity(v, None, kernels)
    assert v.checks["own_kernels"] is False
    assert violation_kind(v.violations[0]) is ViolationKind.FOREIGN_KERNELS
    assert "at::native" in v.violations[0]
    ok = _timed_verdict(0.6)
    _check_timing_integrity(ok, None, _kernels(0.7, []))
    assert ok.checks["own_kernels"] is True and not ok.violations


def _kernels(own_share: float, foreign: list[str]) -> KernelSummary:
    return KernelSummary(0.5, 0.5 * own_share, 0.5 * (1 - own_share), 0.0, own_share, foreign)


def _timing(median_ms: float, side_work: bool = False) -> TimingStats:
    return TimingStats(
        median_ms,
        median_ms,
        median_ms,
        median_ms,
        0.0,
        median_ms + 0.02,
        0.02,
        0.15,
        0.1 if side_work else 0.0,
        side_work,
        20,
        5,
        2,
    )


def test_side_work_is_flagged_not_rejected():
    v = _timed_verdict(1.0)
    _check_timing_integrity(v, _timing(1.0, side_work=True), None)
    assert v.flags["side_work"] == {"flush_ms": 0.15, "flush_excess_ms": 0.1}
    assert not v.violations


def test_a_profiled_kernel_time_far_above_the_measured_time_is_flagged():
    v = _timed_verdict(1.0)
    _check_timing_integrity(v, _timing(0.1), _kernels(1.0, []))
    assert v.flags["profile_mismatch"] == {"profile_kernel_ms": 0.5, "measured_ms": 0.1}
    assert not v.violations


def test_kernel_names_are_attributed_by_their_own_namespace():
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)"
    assert kernel_origin(fill, False) == "torch"
    assert kernel_origin("triton_poi_fused_add_0", False) == "torch"
    # A candidate kernel templated on a torch type is still the candidate's.
    assert kernel_origin("void gated_kernel<c10::Half>(c10::Half*, int)", False) == "own"
    assert kernel_origin("void my_gemm_kernel(float const*, float*)", False) == "own"
    cublas = "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x32_cublas"
    assert kernel_origin(cublas, False) == "vendor"
    assert kernel_origin(cublas, True) == "own"
    assert kernel_origin("nvjet_sst_128x64_64x4_1x2_h_bz_NNN", False) == "vendor"
    assert kernel_origin("Memcpy HtoD (Pageable -> Device)", False) == "memory"
    # CuPy's own ufuncs and copies are a library's, even where vendor GEMMs are allowed
    assert kernel_origin("cupy_copy__float32_float32", True) == "vendor"
    assert kernel_origin("my_cupy_kernel", False) == "own"


def test_cpu_timer_reports_wall_clock_and_no_side_work():
    calls = []
    stats, index, out = Timer("cpu").time_ms(lambda x: calls.append(x) or x, [[1], [2]], 1, 4)
    assert len(calls) == 5 and index == 0 and out == 1
    assert stats["runs"] == 4 and stats["side_work"] is False
    assert stats["median_ms"] == stats["event_median_ms"] >= 0


def test_work_done_after_saying_done_is_added_to_the_candidates_time():
    # A runner may answer "done" before its work is over and finish it while handing over
    # its outputs: its calls' time from "done" to the reply, beyond its baselines', counts.
    import dataclasses

    from cuda_gym.judge.judge import Judge

    eager = {"median_ms": 2.0, "finish_ms": 0.7}
    late = Verdict(correct=True)
    Judge._set_speedups(late, dataclasses.replace(_timing(0.1), finish_ms=1.6), {"eager": eager})
    assert late.time_ms["candidate"] == pytest.approx(1.0)
    assert late.flags["finish_excess_ms"] == pytest.approx(0.9)
    honest = Verdict(correct=True)
    Judge._set_speedups(honest, dataclasses.replace(_timing(1.0), finish_ms=0.6), {"eager": eager})
    assert honest.time_ms["candidate"] == 1.0 and honest.flags["finish_excess_ms"] == 0.0


def test_a_baseline_finish_slowed_by_a_busy_host_leaves_no_room_to_hide_work():
    # The baseline's calls were timed while the host was busy: its median finish is slow, its
    # fastest one is not. A candidate hiding 0.9 ms after "done" in every call is charged by
    # the fastest ones; one hiding it in most calls (not its fastest) by the medians.
    import dataclasses

    from cuda_gym.judge.judge import Judge

    eager = {"median_ms": 2.0, "finish_ms": 2.5, "finish_min_ms": 0.6}
    every = Verdict(correct=True)
    late = dataclasses.replace(_timing(0.1), finish_ms=1.6, finish_min_ms=1.5)
    Judge._set_speedups(every, late, {"eager": eager})
    assert every.flags["finish_excess_ms"] == pytest.approx(0.9)
    assert every.time_ms["candidate"] == pytest.approx(1.0)
    quiet = dict(eager, finish_ms=0.7)
    most = Verdict(correct=True)
    Judge._set_speedups(most, dataclasses.replace(late, finish_min_ms=0.6), {"eager": quiet})
    assert most.flags["finish_excess_ms"] == pytest.approx(0.9)
    honest = Verdict(correct=True)
    fair = dataclasses.replace(_timing(1.0), finish_ms=0.7, finish_min_ms=0.6)
    Judge._set_speedups(honest, fair, {"eager": eager})
    assert honest.time_ms["candidate"] == 1.0 and honest.flags["finish_excess_ms"] == 0.0
