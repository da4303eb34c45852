"""JudgeClient: the env's and the tools' one door to the judge (device, GPU placement, slots).

The env and its tools never reach the execution layer (`cuda_gym.runtime`) themselves: they ask a
judge client to build or evaluate, and the client resolves the device, places the call on a GPU
and holds one of the process-wide judge slots while the call runs. Anything with the same five
members (`device`, `device_name`, `slot`, `build`, `evaluate`) can stand in for it, e.g. a
scripted judge in tests (`tests/fakes.py`): `CudaKernelEnv(judge=ScriptedJudge(...))`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, runtime_checkable

from cuda_gym.judge.config import JudgeConfig
from cuda_gym.judge.device import judge_gpus
from cuda_gym.judge.judge import Judge
from cuda_gym.judge.verdict import BuildResult, Verdict
from cuda_gym.runtime.slots import SlotSizes, default_slot_sizes, judge_slots
from cuda_gym.tasks import Task


@runtime_checkable
class JudgeLike(Protocol):
    """What the env and the tools need of a judge."""

    device: str
    device_name: str

    def slot(self, *, timed: bool) -> AbstractContextManager[float]:
        """Hold a judge slot for the block; yield the seconds waited for it."""
        ...

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
        default = default_slot_sizes(self.device, gpu_count=max(1, len(gpus)))
        sizes = SlotSizes(
            timed=timed_slots or default.timed, untimed=untimed_slots or default.untimed
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

    @contextmanager
    def slot(self, *, timed: bool) -> Iterator[float]:
        """Hold a timed or untimed judge slot for the block; yield the seconds waited."""
        with self.slots.hold(timed=timed) as waited:
            yield waited

    def build(self, solution_dir: str | os.PathLike) -> BuildResult:
        """Build the workspace's kernels/ (the caller holds a slot)."""
        return self.judge.build(solution_dir)

    def evaluate(
        self,
        task: Task,
        solution_dir: str | os.PathLike,
        *,
        timing: bool = True,
        profile: bool = False,
    ) -> Verdict:
        """Judge the workspace against the task (the caller holds a slot)."""
        return self.judge.evaluate(task, solution_dir, timing=timing, profile=profile)
