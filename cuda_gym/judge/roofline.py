"""Speed-of-light bounds: no correct kernel can beat bytes / bandwidth or flops / peak.

The probe measures a task's compulsory traffic (its inputs and outputs) and its flop count
(PyTorch's FlopCounterMode: matmuls; not convolutions, which fast algorithms do in fewer); with
the GPU's nominal peaks (its copy bandwidth, measured, where the GPU is not listed) they give the
bound. A candidate timed below it is measuring something other than the task.

Nominal, not measured, bandwidth where it is known: a copy reaches only part of the peak, and less
again while other judgements share the GPU, so a measured bound can flag PyTorch's own eager
kernels as faster than light (benchmarks/README.md, "Numbers behind design choices").
"""

from __future__ import annotations

import torch

# Nominal dense fp32 (non-tensor-core) peaks, FLOP/s. A GPU missing here gets a measured bound.
FP32_PEAK_FLOPS = {
    "H200": 67e12,
    "H100": 67e12,
    "A100": 19.5e12,
    "L40S": 91.6e12,
    "B200": 80e12,
}
# Nominal DRAM bandwidth, bytes/s: the fastest variant sold under each name (H100 NVL, A100 80GB
# SXM), so that the bound holds for all of them. A GPU missing here gets its measured bandwidth.
PEAK_BANDWIDTH = {
    "H200": 4.8e12,
    "H100": 3.9e12,
    "A100": 2.039e12,
    "L40S": 0.864e12,
    "B200": 8.0e12,
}
# Candidate time below this fraction of the bound is flagged (leaves room for timer noise).
SOL_SLACK = 0.8


def tensor_bytes(values) -> int:
    """Bytes held by the tensors in a list."""
    return sum(x.numel() * x.element_size() for x in values if isinstance(x, torch.Tensor))


def count_flops(model, inputs: list) -> int:
    """FLOPs of one forward call that no algorithm avoids, as PyTorch's flop counter sees them.

    Convolutions are left out: the counter counts them as direct convolutions, and cuDNN's
    Winograd and FFT algorithms do fewer multiplications, so PyTorch's own convolutions can
    beat a bound from the direct count (benchmarks/README.md, "Numbers behind design choices").
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(*inputs)
    counts = counter.get_flop_counts().get("Global", {})
    return int(sum(n for op, n in counts.items() if "convolution" not in str(op)))


def measure_bandwidth(device: str = "cuda", nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read plus bytes written)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(10):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    return 2 * nbytes * 10 / (start.elapsed_time(end) / 1e3)


def peak_flops(device_name: str) -> float | None:
    """The nominal fp32 peak of a known GPU, or None."""
    return _nominal(FP32_PEAK_FLOPS, device_name)


def peak_bandwidth(device_name: str) -> float | None:
    """The nominal DRAM bandwidth (bytes/s) of a known GPU, or None."""
    return _nominal(PEAK_BANDWIDTH, device_name)


def _nominal(table: dict[str, float], device_name: str) -> float | None:
    for key, value in table.items():
        if key in device_name:
            return value
    return None


def speed_of_light_ms(bytes_moved: int, flops: int, bandwidth: float, peak: float | None) -> float:
    """Lower bound on one call's time, in milliseconds."""
    bound_s = bytes_moved / bandwidth if bandwidth > 0 else 0.0
    if peak:
        bound_s = max(bound_s, flops / peak)
    return bound_s * 1e3
