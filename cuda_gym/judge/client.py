"""JudgeClient: the env's and the tools' one door to the judge (device, GPU placement, slots).

The env and its tools never reach the execution layer (`cuda_gym.runtime`) themselves: they ask a
judge client to build or evaluate, and the client resolves the device, builds under one of the
process's build slots, then places the call on a GPU and holds one of the process-wide judge
slots for its device phase. Anything with the same four members (`device`, `device_name`,
`build`, `evaluate`) can stand in for it, e.g. a scripted judge in tests (`tests/fakes.py`):
`CudaKernelEnv(judge=ScriptedJudge(...))`. The seconds a call waited for slots are in its result
(`BuildResult.wait_s`, `Verdict.waited_s()`).
"""

from __future__ import annotations

import functools
import os
from typing import Protocol, runtime_checkable

from cuda_gym.judge.config import JudgeConfig
from cuda_gym.judge.device import judge_gpus
from cuda_gym.judge.judge import Judge
from cuda_gym.judge.verdict import BuildResult, Verdict
from cuda_gym.runtime.slots import default_slot_sizes, judge_slots
from cuda_gym.tasks import Task


@runtime_checkable
class JudgeLike(Protocol):
    """What the env and the tools need of a judge."""

    device: str
    device_name: str

    def build(self, solution_dir: str | os.PathLike) -> BuildResult:
        """Build the workspace's kernels/."""
        ...

    def evaluate(
        self,
        task: Task,
        solution_dir: str | os.PathLike,
        *,
        timing: bool = True,
        profile: bool = False,
    ) -> Verdict:
        """Judge the workspace against the task."""
        ...


class JudgeClient:
    """A Judge for one resolved device, with the process-wide slots of its envs.

    Args:
        config: The judge configuration; its device must already be "cuda" or "cpu".
        timed_slots: Concurrent timed judgements in this process (None: one per device).
        untimed_slots: Concurrent untimed calls (None: sized from the device).
    """

    def __init__(
        self,
        config: JudgeConfig,
        *,
        timed_slots: int | None = None,
        untimed_slots: int | None = None,
    ) -> None:
        self.config = config
        self.device = config.device
        self.judge = Judge(config)
        gpus = judge_gpus(self.device)  # slots place each judge call on one of them
        sizes = default_slot_sizes(  # 0 or None: the device's default
            self.device, max(1, len(gpus)), timed=timed_slots or None, untimed=untimed_slots or None
        )
        self.slots = judge_slots(self.device, sizes, gpus)

    def __deepcopy__(self, memo):
        # A judge is a shared service (slots, caches): gymnasium copies an env's spec with its
        # kwargs, and the copy must judge through the same object.
        return self

    @property
    def device_name(self) -> str:
        """The GPU or CPU model the judge runs on."""
        return self.judge.info.name

    def build(self, solution_dir: str | os.PathLike) -> BuildResult:
        """Build the workspace's kernels/ (under a build slot; no device slot)."""
        return self.judge.build(solution_dir)

    def evaluate(
        self,
        task: Task,
        solution_dir: str | os.PathLike,
        *,
        timing: bool = True,
        profile: bool = False,
    ) -> Verdict:
        """Judge the workspace against the task; its device phase holds a judge slot.

        The slot is a timed one when `timing`, else an untimed one.
        """
        device_slot = functools.partial(self.slots.hold, timed=timing)
        return self.judge.evaluate(
            task, solution_dir, timing=timing, profile=profile, device_slot=device_slot
        )
