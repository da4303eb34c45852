"""Preloads for the zygote tests: each leaves the zygote in a state children must not inherit."""

import sys


def pretend_cuda_initialised() -> None:
    """Make the zygote's driver check answer yes (the zygote runs as __main__)."""
    sys.modules["__main__"].driver_initialised = lambda: True


def break_device_identity() -> None:
    """The judge worker's preload, then a device lookup that fails in every forked child (as CUDA
    does in a child forked after the driver was initialised)."""
    from cuda_gym.judge.worker import preload
    from cuda_gym.runtime import device_gate

    preload()

    def failing(device: str) -> str:
        raise RuntimeError("CUDA driver initialization failed (simulated: forked after cuInit)")

    device_gate.device_identity = failing


def worker_preload_and_nvml() -> None:
    """The judge worker's preload, then NVML initialised twice (as PyTorch's device count does)."""
    import ctypes

    from cuda_gym.judge.worker import preload

    preload()
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == 0 and nvml.nvmlInit_v2() == 0
