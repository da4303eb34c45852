"""SynthConfig: how many tasks to synthesise, for which device, and how to filter them."""

from __future__ import annotations

from dataclasses import dataclass, field

from cuda_gym.errors import ConfigError
from cuda_gym.synth.catalogue import FAMILIES

# Close to the published distribution (83.8 % two-operator chains).
DEFAULT_CHAIN_LENGTHS = {1: 0.06, 2: 0.82, 3: 0.08, 4: 0.03, 5: 0.01}
# Eager-time windows in ms: the published 1-100 ms on the GPU; smaller tasks on the CPU.
# Stochastic operators are sampled rarely: the filters would drop their tasks anyway.
DEFAULT_FAMILY_WEIGHTS = {"dropout": 0.25}
DEFAULT_WINDOWS_MS = {"cuda": (1.0, 100.0), "cpu": (0.3, 100.0)}


def parse_chain_lengths(text: str) -> dict[int, float]:
    """Parse "1:0.1,2:0.8,3:0.1" into {1: 0.1, 2: 0.8, 3: 0.1}."""
    out: dict[int, float] = {}
    try:
        for part in text.split(","):
            length, weight = part.split(":")
            out[int(length)] = float(weight)
    except ValueError as exc:
        raise ConfigError(
            f"chain lengths must look like '1:0.1,2:0.8,3:0.1', got {text!r}"
        ) from exc
    return out


@dataclass(frozen=True)
class SynthConfig:
    """Configuration of the data-synthesis pipeline (`cuda-gym synth`).

    Attributes:
        n: Number of accepted tasks wanted.
        device: Device the tasks are sized and filtered for: "cuda" or "cpu".
        seed: Seed of the composer; a fixed seed and software stack give the same candidates.
        chain_lengths: Weight of each chain length (1-5 operators).
        family_weights: Weight of each operator family when an operator is sampled
            (families not named get weight 1; dropout gets 0.25 by default).
        window_ms: Eager-time window (low, high) in ms; None uses the device's default.
        compile_check: Run each task under torch.compile (the slow filter; off in quick tests).
        calibrate: Rescale the batch size once when the measured eager time is off the window.
        decontaminate_against: Directory of reference problems (e.g. a KernelBench checkout);
            tasks with AST similarity above `similarity_threshold` to any are dropped.
        similarity_threshold: AST similarity above which a task counts as a copy.
        workers: Parallel filter workers (processes).
        task_timeout_s: Limit for filtering one task (a hung task costs one worker restart).
        max_candidates: Give up after this many candidates (default 40 * n + 50).
        validation_fraction: Share of accepted tasks put in the "validation" split.
        id_prefix: Prefix of task ids ("synth" gives "synth_00042").
        journal: A JSONL file every finished candidate is appended to. A later run with the
            same settings resumes from it: its candidates are not filtered again.
        time_limit_s: Stop after this many seconds (candidates in flight are dropped; the
            journal keeps the finished ones), writing the tasks accepted so far.
    """

    n: int = 20
    device: str = "cpu"
    seed: int = 0
    chain_lengths: dict[int, float] = field(default_factory=lambda: dict(DEFAULT_CHAIN_LENGTHS))
    family_weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_FAMILY_WEIGHTS))
    window_ms: tuple[float, float] | None = None
    compile_check: bool = True
    calibrate: bool = True
    decontaminate_against: str | None = None
    similarity_threshold: float = 0.9
    workers: int = 2
    task_timeout_s: float = 300.0
    max_candidates: int | None = None
    validation_fraction: float = 0.1
    id_prefix: str = "synth"
    journal: str | None = None
    time_limit_s: float | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError("SynthConfig.n must be at least 1")
        if self.device not in ("cuda", "cpu"):
            raise ConfigError(f"SynthConfig.device must be 'cuda' or 'cpu', got {self.device!r}")
        lengths = self.chain_lengths
        if not lengths or any(k not in range(1, 6) or w < 0 for k, w in lengths.items()):
            raise ConfigError("chain_lengths must map lengths 1-5 to non-negative weights")
        if sum(lengths.values()) <= 0:
            raise ConfigError("chain_lengths needs at least one positive weight")
        unknown = set(self.family_weights) - set(FAMILIES)
        if unknown:
            raise ConfigError(f"unknown families {sorted(unknown)}; use names from {FAMILIES}")
        if self.window_ms is not None:
            low, high = self.window_ms
            if not 0 <= low < high:
                raise ConfigError("window_ms must be (low, high) with 0 <= low < high")
        if not 0 < self.similarity_threshold <= 1:
            raise ConfigError("similarity_threshold must be in (0, 1]")
        if self.workers < 1:
            raise ConfigError("workers must be at least 1")
        if self.task_timeout_s <= 0:
            raise ConfigError("task_timeout_s must be positive")
        if not 0 <= self.validation_fraction < 1:
            raise ConfigError("validation_fraction must be in [0, 1)")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ConfigError("time_limit_s must be positive")
        if not self.id_prefix.isidentifier():
            raise ConfigError("id_prefix must be a Python identifier, e.g. 'synth'")

    @property
    def window(self) -> tuple[float, float]:
        """The eager-time window in ms."""
        return self.window_ms or DEFAULT_WINDOWS_MS[self.device]

    def fingerprint(self) -> dict:
        """What decides which candidates are made and how they are filtered (for the journal)."""
        return {
            "device": self.device,
            "seed": self.seed,
            "chain_lengths": {str(k): v for k, v in sorted(self.chain_lengths.items())},
            "family_weights": dict(sorted(self.family_weights.items())),
            "window_ms": list(self.window),
            "compile_check": self.compile_check,
            "calibrate": self.calibrate,
            "decontaminate_against": self.decontaminate_against,
            "similarity_threshold": self.similarity_threshold,
        }

    @property
    def candidate_limit(self) -> int:
        """How many candidates may be tried before giving up."""
        return self.max_candidates or 40 * self.n + 50
