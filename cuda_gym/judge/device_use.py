"""What a judgement's processes hold in GPU memory, read from the NVIDIA driver (NVML).

The memory ledger (cuda_gym.runtime.device_gate.MemoryLedger) admits a judgement on an estimate
made from the task's probe, before anything ran. The driver measures what the judgement then
held, once, right after its timed calls: NVML's per-process counts (the kernel driver's, not a
figure the candidate's process reports) of the driver and of its runner with every descendant.
The timed calls keep the runner's memory cached (cuda_gym.judge.runner empties it only after
untimed calls), so its count then holds forward's peak. The driver adds its own peak from
PyTorch's allocator (`peak_bytes`). The judge reserves the next judgements of the same task
from the figure (cuda_gym.judge.judge.device_bytes_for).

One query, not a sampling thread: NVML's process query takes the kernel driver's locks, and a
thread beside the timed calls would compete with them for the GIL.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)


def _parent(pid: int) -> int | None:
    try:
        stat = open(f"/proc/{pid}/stat").read()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _descends(pid: int, roots: set[int]) -> bool:
    """Whether `pid` is one of `roots` or a descendant of one."""
    at: int | None = pid
    for _ in range(32):
        if at is None or at <= 1:
            return False
        if at in roots:
            return True
        at = _parent(at)
    return False


def process_bytes(uuid: str, runners: list[int]) -> tuple[int, int] | None:
    """(this process's, the runners' and their descendants') device memory now, bytes.

    None where NVML is missing, does not know the GPU `uuid` (torch's device UUID) or gives no
    per-process figure (some virtualised GPUs).
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        logger.debug("device memory use is not measured: %s", exc)
        return None
    try:
        text = str(uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(
            text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
        )
        processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception as exc:
        logger.debug("device memory use is not measured: %s", exc)
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    me, roots = os.getpid(), set(runners)
    own = others = 0
    found = False
    for p in processes:
        used = p.usedGpuMemory
        if p.pid == me:
            if not isinstance(used, int):
                return None
            own, found = own + used, True
        elif _descends(p.pid, roots):
            if not isinstance(used, int):
                return None
            others += used
    return (own, others) if found else None


def judgement_bytes(uuid: str, runners: list[int]) -> int | None:
    """The judgement's device memory at its peak, bounded from above, bytes (None: unknown).

    This process's count now with PyTorch's peak in place of what its allocator holds now,
    plus the runners' count now.
    """
    import torch

    counts = process_bytes(uuid, runners)
    if counts is None:
        return None
    own, others = counts
    held = torch.cuda.memory_reserved()
    return max(0, own - held) + torch.cuda.max_memory_reserved() + others
