"""EnvConfig: what an episode of CudaKernel-v0 looks like (task choice, budgets, judge)."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass

from cuda_gym.errors import ConfigError
from cuda_gym.judge import JudgeConfig
from cuda_gym.judge.config import MODES


@dataclass(frozen=True)
class EnvConfig:
    """Configuration of CudaKernelEnv; every field can be passed to `gym.make` by name.

    Attributes:
        device: "auto" (GPU when one is usable, else CPU), "cuda" or "cpu".
        task: A fixed task for every episode: a built-in id, a path to a KernelBench-format
            file, or source text. None samples from `task_ids`.
        task_ids: Task ids to sample from when `task` is None (None = all of `task_source`);
            ids not in `task_source` are loaded like `task` (built-in id, path).
        task_source: Where sampled tasks come from: "auto" (the shipped synthesised set when
            the package has one, else the hand-written built-ins), "builtin" (the hand-written
            tasks), "synth", "synth:train" or "synth:validation" (the shipped set),
            "kernelbench:PATH:LEVEL", or a path to a `.parquet` file or a directory of tasks.
        max_turns: Steps per episode before truncation.
        time_budget_s: Wall-clock seconds per episode before truncation.
        max_invalid_actions: Malformed actions tolerated before truncation.
        max_observation_chars: Bound on one observation's length.
        judge_on_truncation: Judge the last workspace state when the episode is truncated.
        tolerance_mode: Precision mode of the judge: "strict", "kernelbench" or "paper"; None
            (the default) is "strict", or `judge.tolerance_mode` when `judge` is given (a
            different value in both raises ConfigError).
        judge: Full judge configuration. Its device must be the env's resolved device
            (ConfigError otherwise: it is never silently replaced).
        workspace_dir: Parent directory for episode workspaces (default: system temp dir).
        timed_judge_slots: Timed judgements (profile, submit, judging on truncation) that may
            run at once in this process, shared by every env with the same slot settings;
            None: 8 per GPU, one per CPU core (runtime/slots.py); their timings take turns
            at the device's gate.
        untimed_judge_slots: Untimed judge calls (compile, run) that may run at once in this
            process; None: sized from the device (4 per GPU, one per CPU core).
    """

    device: str = "auto"
    task: str | None = None
    task_ids: tuple[str, ...] | None = None
    task_source: str = "auto"
    max_turns: int = 40
    time_budget_s: float = 3600.0
    max_invalid_actions: int = 8
    max_observation_chars: int = 16_000
    judge_on_truncation: bool = True
    tolerance_mode: str | None = None
    judge: JudgeConfig | None = None
    workspace_dir: str | None = None
    timed_judge_slots: int | None = None
    untimed_judge_slots: int | None = None

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cuda", "cpu"):
            raise ConfigError(f"device must be 'auto', 'cuda' or 'cpu', got {self.device!r}")
        if self.max_turns < 1:
            raise ConfigError("max_turns must be at least 1")
        if self.time_budget_s <= 0:
            raise ConfigError("time_budget_s must be positive")
        if self.max_invalid_actions < 1:
            raise ConfigError("max_invalid_actions must be at least 1")
        if self.max_observation_chars < 1000:
            raise ConfigError("max_observation_chars must be at least 1000")
        for name in ("timed_judge_slots", "untimed_judge_slots"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigError(f"{name} must be a positive integer or None, got {value!r}")
        if self.tolerance_mode is not None and self.tolerance_mode not in MODES:
            raise ConfigError(
                f"Unknown tolerance_mode {self.tolerance_mode!r}; use one of {MODES}"
            )
        if (
            self.judge is not None
            and self.tolerance_mode is not None
            and self.tolerance_mode != self.judge.tolerance_mode
        ):
            raise ConfigError(
                f"tolerance_mode={self.tolerance_mode!r} but judge.tolerance_mode="
                f"{self.judge.tolerance_mode!r}: set it in one place."
            )
        if self.task_ids is not None:
            if isinstance(self.task_ids, str) or not self.task_ids:
                raise ConfigError("task_ids must be a non-empty tuple of task ids")
            object.__setattr__(self, "task_ids", tuple(self.task_ids))

    @classmethod
    def from_kwargs(cls, base: EnvConfig | None = None, **overrides) -> EnvConfig:
        """Build a config from `base` with named fields replaced; unknown names raise.

        Raises:
            ConfigError: A name is not a field of EnvConfig (the message suggests the closest).
        """
        names = [f.name for f in dataclasses.fields(cls)]
        for key in overrides:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"Unknown CudaKernelEnv option {key!r}.{hint}")
        return dataclasses.replace(base or cls(), **overrides)

    def judge_config(self, device: str) -> JudgeConfig:
        """The judge configuration for the resolved device."""
        if self.judge is not None:
            if self.judge.device != device:
                raise ConfigError(
                    f"judge.device is {self.judge.device!r} but the env runs on {device!r}: "
                    f"pass JudgeConfig(device={device!r}, ...) or set the env's device to "
                    f"{self.judge.device!r}."
                )
            return self.judge
        return JudgeConfig(device=device, tolerance_mode=self.tolerance_mode or "strict")
