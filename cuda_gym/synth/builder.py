"""Builder: the code and shapes of one synthesised task while its operators are chained.

Every size is a top-level constant of the task file, and every shape is kept as Python
expressions over those constants, so one task file holds the sizes of its main device and (as
`CPU_SIZES`) smaller ones for the CPU. Each constant has two values: index 0 for the main device,
index 1 for the CPU; `value(expr, which)` evaluates an expression under either set.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

MAIN, CPU = 0, 1
HEADER = '''"""{description}"""

import torch
import torch.nn as nn
import torch.nn.functional as F


'''


@dataclass(frozen=True)
class SizeProfile:
    """Size choices of one device for the dimensions a task starts with or creates.

    Attributes:
        features: Last-dimension sizes of 2-D data and new feature dims (Linear outputs).
        channels: Channel counts (powers of two, so group counts divide them).
        length: Lengths of 1-D signals (rank-3 data).
        spatial: Heights and widths of 2-D images (rank-4 data).
        depth: Depths, heights and widths of volumes (rank-5 data).
        target_ms: Eager time the batch size is chosen for, by the cost model.
        bytes_per_s: Memory bandwidth of the cost model.
        flops_per_s: fp32 throughput of the cost model.
        max_bytes: Bound on the sum of all tensors of one forward pass.
        max_batch: Largest batch size.
    """

    features: tuple[int, ...]
    channels: tuple[int, ...]
    length: tuple[int, ...]
    spatial: tuple[int, ...]
    depth: tuple[int, ...]
    target_ms: float
    bytes_per_s: float
    flops_per_s: float
    max_bytes: float
    max_batch: int


PROFILES = {
    "cuda": SizeProfile(
        features=(512, 1024, 2048, 4096),
        channels=(16, 32, 64, 128),
        length=(1024, 2048, 4096, 8192),
        spatial=(64, 128, 256),
        depth=(16, 32, 48),
        target_ms=4.0,
        bytes_per_s=2.5e12,
        flops_per_s=3.0e13,
        max_bytes=8e9,
        max_batch=1 << 20,
    ),
    "cpu": SizeProfile(
        features=(64, 128, 256),
        channels=(8, 16, 32),
        length=(64, 128, 256),
        spatial=(16, 24, 32),
        depth=(8, 12),
        target_ms=3.0,
        bytes_per_s=4e9,
        flops_per_s=1.5e10,
        max_bytes=96e6,
        max_batch=4096,
    ),
}


@dataclass
class Builder:
    """A task under construction: constants, constructor, forward body, inputs and shape.

    Attributes:
        profiles: Size profiles, (main device, CPU).
        consts: Constant name -> [main value, CPU value], in definition order.
        params: Constructor parameters as (name, expression passed by get_init_inputs).
        init_lines: Lines of `Model.__init__` after `super().__init__()`.
        forward_lines: Lines of `Model.forward` before `return x`.
        inputs: Forward arguments after `x` as (name, expression creating it in get_inputs).
        shape: The current tensor's shape, one expression per dimension.
        dtype: "float", or "long" after an index-valued op (nothing may follow it).
        costs: (flops, bytes) expressions per op, for the batch-size model.
        ops: Catalogue names of the ops applied so far.
        start: The input shape expressions.
    """

    profiles: tuple[SizeProfile, SizeProfile]
    consts: dict[str, list[int]] = field(default_factory=dict)
    params: list[tuple[str, str]] = field(default_factory=list)
    init_lines: list[str] = field(default_factory=list)
    forward_lines: list[str] = field(default_factory=list)
    inputs: list[tuple[str, str]] = field(default_factory=list)
    shape: list[str] = field(default_factory=list)
    dtype: str = "float"
    costs: list[tuple[str, str]] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    start: list[str] = field(default_factory=list)
    _attrs: dict[str, int] = field(default_factory=dict)

    # -- values -----------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """Rank of the current tensor."""
        return len(self.shape)

    def value(self, expr: str, which: int) -> int:
        """The integer value of a size expression for the main device (0) or the CPU (1)."""
        env = {name: vals[which] for name, vals in self.consts.items()}
        return int(eval(expr, {"__builtins__": {}, "int": int}, env))  # our own expressions

    def dims(self, which: int, shape: list[str] | None = None) -> list[int]:
        """The current (or a given) shape's values."""
        return [self.value(d, which) for d in (self.shape if shape is None else shape)]

    def both(self, expr: str) -> tuple[int, int]:
        """(main, CPU) values of an expression."""
        return self.value(expr, MAIN), self.value(expr, CPU)

    def pick(self, rng, kind: str) -> tuple[int, int]:
        """A size of `kind` ("features", "channels", ...) for each device's profile."""
        main = getattr(self.profiles[MAIN], kind)
        cpu = getattr(self.profiles[CPU], kind)
        return int(main[rng.integers(len(main))]), int(cpu[rng.integers(len(cpu))])

    # -- names ------------------------------------------------------------------------------

    def const(self, base: str, values: tuple[int, int]) -> str:
        """Define a new top-level constant; return its name."""
        name, k = base, 2
        while name in self.consts:
            name, k = f"{base}_{k}", k + 1
        self.consts[name] = [int(values[0]), int(values[1])]
        return name

    def param(self, base: str, expr: str) -> str:
        """A constructor parameter whose value get_init_inputs passes as `expr`."""
        taken = {p for p, _ in self.params} | {n for n, _ in self.inputs}
        name, k = base, 2
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        self.params.append((name, expr))
        return name

    def attr(self, base: str) -> str:
        """A fresh attribute name `self.<base><k>`."""
        k = self._attrs.get(base, 0) + 1
        self._attrs[base] = k
        return f"self.{base}{k}"

    def add_input(self, base: str, creator: str, shape: list[str] | None = None) -> str:
        """A further forward argument, created in get_inputs by `creator`; returns its name.

        `shape` (its size expressions) counts its bytes in the cost model.
        """
        taken = {n for n, _ in self.inputs} | {p for p, _ in self.params} | {"x"}
        name, k = base, 2
        while name in taken:
            name, k = f"{base}{k}", k + 1
        self.inputs.append((name, creator))
        if shape is not None:
            self.costs.append(("0", f"4 * ({numel(shape)})"))
        return name

    # -- ops --------------------------------------------------------------------------------

    def begin(self, rank: int, rng) -> None:
        """Create the input tensor `x` of the given rank with sizes from the profiles."""
        kinds = {
            1: ["features"],
            2: ["features"],
            3: ["channels", "length"],
            4: ["channels", "spatial", "spatial"],
            5: ["channels", "depth", "depth", "depth"],
        }[rank]
        names = {"spatial": ["height", "width"], "depth": ["depth", "height", "width"]}
        batch = self.const("batch_size", (1, 1))
        shape = [batch]
        used: dict[str, int] = {}
        for kind in kinds[: rank - 1]:
            k = used.get(kind, 0)
            used[kind] = k + 1
            label = names[kind][k] if kind in names else kind
            shape.append(self.const(label, self.pick(rng, kind)))
        self.shape = shape
        self.start = list(shape)

    def emit(self, line: str, new_shape: list[str], flops: str = "0", op: str = "") -> None:
        """Add a forward line that turns the current tensor into one of `new_shape`."""
        self.forward_lines.append(line)
        moved = f"4 * ({numel(self.shape)} + {numel(new_shape)})"
        self.costs.append((flops, moved))
        self.shape = list(new_shape)
        if op:
            self.ops.append(op)

    def copy(self) -> Builder:
        """An independent copy (ops are tried on a copy and kept only if valid)."""
        return copy.deepcopy(self)

    # -- sizing -----------------------------------------------------------------------------

    def cost_per_batch(self, which: int) -> tuple[float, float]:
        """(flops, bytes) of one forward pass per unit of batch size."""
        saved = self.consts["batch_size"][which]
        self.consts["batch_size"][which] = 1
        try:
            flops = sum(self.value(f, which) for f, _ in self.costs)
            moved = sum(self.value(b, which) for _, b in self.costs)
        finally:
            self.consts["batch_size"][which] = saved
        return float(flops), float(moved)

    def choose_batch(self, which: int) -> int:
        """Batch size that brings the cost model's time near the profile's target."""
        prof = self.profiles[which]
        flops, moved = self.cost_per_batch(which)
        per_batch_ms = 1e3 * (moved / prof.bytes_per_s + flops / prof.flops_per_s)
        batch = prof.target_ms / max(per_batch_ms, 1e-12)
        batch = min(batch, prof.max_bytes / max(moved, 1.0), prof.max_batch)
        return pow2_floor(max(batch, 1.0))

    # -- rendering --------------------------------------------------------------------------

    def render(self, description: str, with_cpu_sizes: bool) -> str:
        """The task file: Model, constants (and CPU_SIZES), get_inputs, get_init_inputs."""
        params = "".join(f", {p}" for p, _ in self.params)
        init = self.init_lines or ["pass"]
        args = "".join(f", {n}" for n, _ in self.inputs)
        lines = [HEADER.format(description=description)]
        lines.append("class Model(nn.Module):\n")
        lines.append(f"    def __init__(self{params}):\n        super().__init__()\n")
        lines += [f"        {line}\n" for line in init]
        lines.append(f"\n    def forward(self, x{args}):\n")
        lines += [f"        {line}\n" for line in self.forward_lines]
        lines.append("        return x\n\n\n")
        for name, vals in self.consts.items():
            lines.append(f"{name} = {vals[MAIN]}\n")
        cpu = {n: v[CPU] for n, v in self.consts.items() if v[CPU] != v[MAIN]}
        if with_cpu_sizes and cpu:
            lines.append(f"\nCPU_SIZES = {cpu!r}\n")
        lines.append("\n\ndef get_inputs():\n")
        lines.append(f"    x = torch.randn({', '.join(self.start)})\n")
        lines += [f"    {n} = {c}\n" for n, c in self.inputs]
        lines.append(f"    return [x{args}]\n\n\ndef get_init_inputs():\n")
        lines.append(f"    return [{', '.join(e for _, e in self.params)}]\n")
        return "".join(lines)


def numel(shape: list[str]) -> str:
    """Expression for the number of elements of a shape."""
    return " * ".join(wrap(d) for d in shape) if shape else "1"


def wrap(expr: str) -> str:
    """Parenthesise a compound expression."""
    return expr if expr.isidentifier() or expr.isdigit() else f"({expr})"


def pow2_floor(x: float) -> int:
    """The largest power of two not above x (at least 1)."""
    n = 1
    while n * 2 <= x:
        n *= 2
    return n
