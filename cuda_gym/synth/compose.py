"""Composer: sample 1-5 catalogue operators and chain them into a KernelBench-format task.

Candidate `index` of a run with seed `seed` is drawn from its own RNG (`[seed, index]`), so a
candidate does not depend on how many others were drawn before it or on which worker filters it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cuda_gym.synth.builder import CPU, MAIN, PROFILES, Builder, numel
from cuda_gym.synth.catalogue import OpSpec, catalogue
from cuda_gym.synth.config import SynthConfig

MIN_OUTPUT_ELEMENTS = 64
MAX_ATTEMPTS = 200
OP_TRIES = 40


@dataclass
class Candidate:
    """A composed task before filtering.

    Attributes:
        index: Position in the run (candidate ids are `index`-ordered).
        seed: The run's seed.
        device: Main device of the sizes ("cuda" or "cpu").
        ops: Catalogue names of the chained operators, in order.
        families: Their families.
        builder: The task's code and sizes (re-rendered when the batch size is calibrated).
    """

    index: int
    seed: int
    device: str
    ops: list[str]
    families: list[str]
    builder: Builder = field(repr=False)

    @property
    def chain_length(self) -> int:
        """Number of operators."""
        return len(self.ops)

    @property
    def batch_size(self) -> int:
        """Batch size for the main device."""
        return self.builder.consts["batch_size"][MAIN]

    def with_batch_size(self, batch: int) -> Candidate:
        """A copy with another main-device batch size (the CPU one is unchanged on CUDA)."""
        b = self.builder.copy()
        b.consts["batch_size"][MAIN] = int(batch)
        if self.device == "cpu":
            b.consts["batch_size"][CPU] = int(batch)
        return Candidate(self.index, self.seed, self.device, self.ops, self.families, b)

    @property
    def description(self) -> str:
        """One line naming the chain."""
        short = [o.split(".")[-1] for o in self.ops]
        return f"Synthesised task: {' -> '.join(short)} (cuda_gym operator catalogue)."

    def source(self) -> str:
        """The KernelBench-format task file."""
        return self.builder.render(self.description, with_cpu_sizes=self.device == "cuda")


def _sample_length(rng, weights: dict[int, float]) -> int:
    lengths = sorted(weights)
    p = np.array([weights[k] for k in lengths], dtype=float)
    return int(rng.choice(lengths, p=p / p.sum()))


def _sample_op(rng, ops: list[OpSpec], weights: dict[str, float]) -> OpSpec:
    families = sorted({o.family for o in ops})
    p = np.array([weights.get(f, 1.0) for f in families], dtype=float)
    if p.sum() <= 0:
        p = np.ones(len(families))
    family = families[int(rng.choice(len(families), p=p / p.sum()))]
    members = [o for o in ops if o.family == family]
    return members[int(rng.integers(len(members)))]


def _valid(b: Builder, final: bool = False) -> bool:
    """All sizes positive on both devices; at the end, enough output elements."""
    for which in (MAIN, CPU):
        if min(b.dims(which), default=1) < 1:
            return False
        if final and b.value(numel(b.shape), which) < MIN_OUTPUT_ELEMENTS:
            return False
    return True


def _try(b: Builder, op: OpSpec, rng) -> Builder | None:
    if b.rank not in op.ranks or b.dtype != "float":
        return None
    trial = b.copy()
    try:
        ok = op.rule(trial, rng)
    except (ValueError, ZeroDivisionError):
        return None
    return trial if ok and _valid(trial) else None


def compose(index: int, config: SynthConfig) -> Candidate:
    """Compose candidate `index` of a run (deterministic in config.seed and index).

    Raises:
        RuntimeError: No valid chain was found in MAX_ATTEMPTS attempts (a catalogue bug).
    """
    rng = np.random.default_rng([config.seed, index])
    ops = list(catalogue())
    cpu = PROFILES["cpu"]
    profiles = (PROFILES[config.device], cpu)
    for _ in range(MAX_ATTEMPTS):
        length = _sample_length(rng, config.chain_lengths)
        first = _sample_op(rng, ops, config.family_weights)
        b = Builder(profiles)
        b.begin(
            int(rng.choice(first.ranks)) if 1 not in first.ranks else int(rng.integers(2, 5)), rng
        )
        b = _try(b, first, rng)
        if b is None:
            continue
        chain = [first]
        for _ in range(length - 1):
            nxt = None
            for _ in range(OP_TRIES):
                op = _sample_op(rng, ops, config.family_weights)
                nxt = _try(b, op, rng)
                if nxt is not None:
                    chain.append(op)
                    b = nxt
                    break
            if nxt is None:
                break
        if len(chain) != length or all(o.data_movement for o in chain):
            continue
        b.consts["batch_size"][MAIN] = b.choose_batch(MAIN)
        b.consts["batch_size"][CPU] = (
            b.consts["batch_size"][MAIN] if config.device == "cpu" else b.choose_batch(CPU)
        )
        if not _valid(b, final=True):
            continue
        return Candidate(
            index=index,
            seed=config.seed,
            device=config.device,
            ops=[o.name for o in chain],
            families=[o.family for o in chain],
            builder=b,
        )
    raise RuntimeError(f"could not compose candidate {index}: no valid operator chain found")
