"""Describe the judge's device (GPU name, architecture, versions) without touching the GPU here.

The env process must not create a CUDA context of its own, so GPU facts come from a short-lived
child process, once per process.
"""

from __future__ import annotations

import functools
import json
import platform
import sys
import threading
from dataclasses import dataclass

from cuda_gym.errors import DeviceUnavailableError
from cuda_gym.runtime import python_child_env, run_process

_PROBE = """
import ctypes, json, torch
ok = torch.cuda.is_available()
info = {"available": ok, "torch": torch.__version__, "cuda": torch.version.cuda}
if ok:
    major, minor = torch.cuda.get_device_capability()
    info.update(name=torch.cuda.get_device_name(), arch=f"{major}.{minor}",
                count=torch.cuda.device_count())
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        buf = ctypes.create_string_buffer(96)
        if nvml.nvmlInit_v2() == 0 and nvml.nvmlSystemGetDriverVersion(buf, 96) == 0:
            info["driver"] = buf.value.decode()
    except OSError:
        pass
print(json.dumps(info))
"""


@dataclass(frozen=True)
class DeviceInfo:
    """What the judge runs on.

    Attributes:
        device: "cuda" or "cpu".
        name: GPU or CPU model name.
        arch: CUDA compute capability such as "9.0", or None on the CPU.
        torch_version: torch.__version__.
        cuda_version: CUDA version torch was built with, or None.
        driver_version: NVIDIA driver version (from NVML), or None.
    """

    device: str
    name: str
    arch: str | None
    torch_version: str
    cuda_version: str | None
    driver_version: str | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return dict(self.__dict__)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


_PROBE_LOCK = threading.Lock()


def cuda_probe() -> dict:
    """Ask a child process whether CUDA works and what the GPU is (cached per process).

    Envs created at once from many threads wait for one probe instead of each starting one.
    """
    with _PROBE_LOCK:
        return _cuda_probe()


@functools.lru_cache(maxsize=1)
def _cuda_probe() -> dict:
    proc = run_process([sys.executable, "-c", _PROBE], timeout_s=120, env=python_child_env())
    if not proc.ok:
        return {"available": False, "error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def judge_gpus(device: str) -> tuple[str, ...]:
    """The GPUs judge slots place calls on (`runtime.slots.visible_gpus`); none on the CPU."""
    from cuda_gym.runtime.slots import visible_gpus

    if device != "cuda":
        return ()
    return visible_gpus(int(cuda_probe().get("count") or 1))


def cuda_available() -> bool:
    """True when a child process can use a CUDA GPU."""
    return bool(cuda_probe().get("available"))


def resolve_device(device: str) -> str:
    """Map "auto" to "cuda" when a GPU works, else "cpu"; check that "cuda" is usable."""
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device == "cuda" and not cuda_available():
        raise DeviceUnavailableError(
            "device='cuda' was requested but no CUDA GPU is usable here; "
            "use device='cpu' (C++ kernels) or device='auto'."
        )
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'auto', 'cuda' or 'cpu', got {device!r}")
    return device


@functools.lru_cache(maxsize=2)
def device_info(device: str) -> DeviceInfo:
    """Facts about the device the judge will use."""
    import torch

    if device == "cuda":
        probe = cuda_probe()
        if not probe.get("available"):
            raise DeviceUnavailableError("no CUDA GPU is usable here")
        return DeviceInfo(
            "cuda", probe["name"], probe["arch"], probe["torch"], probe["cuda"], probe.get("driver")
        )
    return DeviceInfo("cpu", _cpu_name(), None, torch.__version__, torch.version.cuda)
