"""The operator catalogue: torch operators with the shape, dtype and argument rules to use them.

The catalogue is built from `torch` itself: activation and dropout modules are discovered from
`torch.nn.modules.activation.__all__` / `torch.nn.modules.dropout.__all__`, and every other entry
names a torch object that must exist in the installed torch (an entry whose target is missing is
left out, so the catalogue follows the torch version). Each entry has a rule that, given the
current tensor's shape, emits the constructor and forward code and the new shape, or declines.
`stochastic` marks operators whose output depends on the RNG (the filters drop those tasks).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

from cuda_gym.synth.builder import Builder, numel, wrap

ANY_RANK = (1, 2, 3, 4, 5)
FAMILIES = (
    "matmul",
    "conv",
    "pooling",
    "norm",
    "activation",
    "reduction",
    "softmax",
    "elementwise",
    "loss",
    "indexing",
    "attention",
    "dropout",
)
# Operators that only move or mask data; a task needs at least one operator that computes.
DATA_MOVEMENT = (
    "flip",
    "roll",
    "gather",
    "index_select",
    "narrow",
    "tril",
    "triu",
    "transpose",
    "flatten",
    "masked_fill",
)

Rule = Callable[[Builder, object], bool]


@dataclass(frozen=True)
class OpSpec:
    """One catalogue entry.

    Attributes:
        name: Qualified torch name, e.g. "nn.Conv2d", "torch.cumsum", "F.normalize".
        family: One of FAMILIES.
        ranks: Input ranks the rule accepts (dim 0 is always the batch).
        rule: Emits the op into a Builder; returns False when it cannot apply.
        stochastic: The op's output depends on the RNG.
        terminal: Nothing may follow it (its output is not a float tensor).
        data_movement: It only moves data (never enough for a task alone).
    """

    name: str
    family: str
    ranks: tuple[int, ...]
    rule: Rule
    stochastic: bool = False
    terminal: bool = False
    data_movement: bool = False


def _choice(rng, options):
    return options[int(rng.integers(len(options)))]


def _nonbatch_dim(b: Builder, rng) -> int:
    return int(rng.integers(1, b.rank))


def _same(b: Builder, line: str, op: str, flops_per_elem: int = 1) -> bool:
    b.emit(line, b.shape, f"{flops_per_elem} * {numel(b.shape)}", op)
    return True


# -- elementwise ----------------------------------------------------------------------------------


def _module_same(cls_name: str, args: Callable[[object], str], attr: str) -> Rule:
    def rule(b: Builder, rng) -> bool:
        name = b.attr(attr)
        b.init_lines.append(f"{name} = nn.{cls_name}({args(rng)})")
        return _same(b, f"x = {name}(x)", f"nn.{cls_name}", 4)

    return rule


def _pointwise(fn: str, guard: str = "x") -> Rule:
    def rule(b: Builder, rng) -> bool:
        return _same(b, f"x = torch.{fn}({guard})", f"torch.{fn}", 2)

    return rule


def _scalar_pointwise(fn: str, args: Callable[[object], str]) -> Rule:
    def rule(b: Builder, rng) -> bool:
        return _same(b, f"x = torch.{fn}(x, {args(rng)})", f"torch.{fn}", 2)

    return rule


def _param_binary(fn: str, init: str, operand: str) -> Rule:
    def rule(b: Builder, rng) -> bool:
        size = b.param("channels" if b.rank > 2 else "features", b.shape[1])
        name = b.attr(fn)
        dims = ", ".join([size] + ["1"] * (b.rank - 2))
        b.init_lines.append(f"{name} = nn.Parameter({init.format(dims=dims)})")
        return _same(b, f"x = torch.{fn}(x, {operand.format(p=name)})", f"torch.{fn}")

    return rule


ACTIVATION_ARGS: dict[str, Callable[[object], str]] = {
    "ReLU": lambda r: "",
    "ReLU6": lambda r: "",
    "LeakyReLU": lambda r: f"negative_slope={_choice(r, [0.01, 0.1, 0.2])}",
    "ELU": lambda r: f"alpha={_choice(r, [0.5, 1.0])}",
    "SELU": lambda r: "",
    "CELU": lambda r: f"alpha={_choice(r, [0.5, 1.0, 2.0])}",
    "GELU": lambda r: f"approximate={_choice(r, ['none', 'tanh'])!r}",
    "SiLU": lambda r: "",
    "Mish": lambda r: "",
    "Softplus": lambda r: f"beta={_choice(r, [1.0, 2.0])}, threshold=20.0",
    "Softsign": lambda r: "",
    "Hardtanh": lambda r: "min_val={}, max_val={}".format(
        *_choice(r, [(-1.0, 1.0), (-0.5, 0.5), (-2.0, 2.0)])
    ),
    "Hardsigmoid": lambda r: "",
    "Hardswish": lambda r: "",
    "Hardshrink": lambda r: f"lambd={_choice(r, [0.1, 0.5])}",
    "Softshrink": lambda r: f"lambd={_choice(r, [0.1, 0.5])}",
    "Tanhshrink": lambda r: "",
    "LogSigmoid": lambda r: "",
    "Sigmoid": lambda r: "",
    "Tanh": lambda r: "",
    "Threshold": lambda r: (
        f"threshold={_choice(r, [0.0, 0.1, 0.5])}, value={_choice(r, [0.0, -1.0])}"
    ),
    "PReLU": lambda r: "",
    "RReLU": lambda r: "",
}
STOCHASTIC_MODULES = {"RReLU"}

POINTWISE = {
    "abs": "x",
    "exp": "x",
    "expm1": "x",
    "exp2": "x",
    "log": "x.abs() + 0.5",
    "log1p": "x.abs()",
    "log2": "x.abs() + 0.5",
    "sqrt": "x.abs()",
    "rsqrt": "x.abs() + 1.0",
    "reciprocal": "x.abs() + 1.0",
    "sin": "x",
    "cos": "x",
    "atan": "x",
    "asinh": "x",
    "erf": "x",
    "erfc": "x",
    "square": "x",
    "sign": "x",
}

SCALAR_POINTWISE = {
    "clamp": lambda r: "min={}, max={}".format(*_choice(r, [(-1.0, 1.0), (-0.5, 2.0), (0.0, 6.0)])),
    "pow": lambda r: str(_choice(r, [2, 3])),
    "fmod": lambda r: str(_choice(r, [0.5, 1.5])),
    "remainder": lambda r: str(_choice(r, [0.5, 1.5])),
}

PARAM_BINARY = {
    "add": ("torch.randn({dims}) * 0.1", "{p}"),
    "mul": ("torch.randn({dims})", "{p}"),
    "div": ("torch.rand({dims}) + 0.5", "{p}"),
    "maximum": ("torch.randn({dims}) * 0.5", "{p}"),
    "minimum": ("torch.randn({dims}) * 0.5", "{p}"),
}


# -- softmax family ----------------------------------------------------------------------------


def _softmax_module(cls_name: str) -> Rule:
    def rule(b: Builder, rng) -> bool:
        dim = _nonbatch_dim(b, rng)
        if min(b.both(b.shape[dim])) < 2:
            return False
        name = b.attr(cls_name.lower())
        b.init_lines.append(f"{name} = nn.{cls_name}(dim={dim})")
        return _same(b, f"x = {name}(x)", f"nn.{cls_name}", 5)

    return rule


def _softmax2d(b: Builder, rng) -> bool:
    name = b.attr("softmax2d")
    b.init_lines.append(f"{name} = nn.Softmax2d()")
    return _same(b, f"x = {name}(x)", "nn.Softmax2d", 5)


def _gumbel(b: Builder, rng) -> bool:
    return _same(b, "x = F.gumbel_softmax(x, tau=1.0, dim=-1)", "F.gumbel_softmax", 8)


# -- reductions and scans ---------------------------------------------------------------------


def _reduction(call: str, op: str, min_size: int = 1, integer: bool = False) -> Rule:
    def rule(b: Builder, rng) -> bool:
        dim = _nonbatch_dim(b, rng)
        if min(b.both(b.shape[dim])) < max(min_size, 2):
            return False
        keep = bool(rng.integers(2)) and not integer
        new = list(b.shape)
        if keep:
            new[dim] = "1"
        else:
            del new[dim]
        line = "x = " + call.format(dim=dim, keep=keep)
        b.emit(line, new, f"2 * {numel(b.shape)}", op)
        if integer:
            b.dtype = "long"
        return True

    return rule


def _scan(call: str, op: str) -> Rule:
    def rule(b: Builder, rng) -> bool:
        dim = _nonbatch_dim(b, rng)
        return _same(b, "x = " + call.format(dim=dim), op, 2)

    return rule


# -- indexing ---------------------------------------------------------------------------------


def _flip(b: Builder, rng) -> bool:
    return _same(b, f"x = torch.flip(x, dims=[{_nonbatch_dim(b, rng)}])", "torch.flip", 0)


def _roll(b: Builder, rng) -> bool:
    dim = _nonbatch_dim(b, rng)
    return _same(
        b, f"x = torch.roll(x, shifts={int(rng.integers(1, 4))}, dims={dim})", "torch.roll", 0
    )


def _gather(b: Builder, rng) -> bool:
    dim = _nonbatch_dim(b, rng)
    shape = ", ".join(b.shape)
    index = b.add_input("index", f"torch.randint(0, {b.shape[dim]}, ({shape},))", b.shape)
    return _same(b, f"x = torch.gather(x, {dim}, {index})", "torch.gather", 0)


def _index_select(b: Builder, rng) -> bool:
    dim = _nonbatch_dim(b, rng)
    size = b.param("dim_size", b.shape[dim])
    name = b.attr("index")
    b.init_lines.append(f'self.register_buffer("{name[5:]}", torch.randperm({size}) // 2)')
    return _same(b, f"x = torch.index_select(x, {dim}, {name})", "torch.index_select", 0)


def _narrow(b: Builder, rng) -> bool:
    dim = _nonbatch_dim(b, rng)
    if min(b.both(b.shape[dim])) < 8:
        return False
    new = list(b.shape)
    new[dim] = f"{wrap(b.shape[dim])} // 2"
    b.emit(f"x = torch.narrow(x, {dim}, 1, {new[dim]}).contiguous()", new, "0", "torch.narrow")
    return True


def _topk(b: Builder, rng) -> bool:
    dim = _nonbatch_dim(b, rng)
    k = int(_choice(rng, [2, 4, 8]))
    if min(b.both(b.shape[dim])) < 2 * k:
        return False
    new = list(b.shape)
    new[dim] = str(k)
    b.emit(f"x = torch.topk(x, {k}, dim={dim}).values", new, f"4 * {numel(b.shape)}", "torch.topk")
    return True


def _sort(b: Builder, rng) -> bool:
    dim = _nonbatch_dim(b, rng)
    desc = bool(rng.integers(2))
    return _same(b, f"x = torch.sort(x, dim={dim}, descending={desc}).values", "torch.sort", 8)


def _tri(fn: str) -> Rule:
    def rule(b: Builder, rng) -> bool:
        return _same(b, f"x = torch.{fn}(x, diagonal={int(rng.integers(-1, 2))})", f"torch.{fn}", 0)

    return rule


def _transpose(b: Builder, rng) -> bool:
    d1, d2 = sorted(int(d) for d in rng.choice(range(1, b.rank), size=2, replace=False))
    new = list(b.shape)
    new[d1], new[d2] = new[d2], new[d1]
    b.emit(f"x = torch.transpose(x, {d1}, {d2}).contiguous()", new, "0", "torch.transpose")
    return True


def _flatten(b: Builder, rng) -> bool:
    new = [b.shape[0], " * ".join(wrap(d) for d in b.shape[1:])]
    b.emit("x = torch.flatten(x, 1)", new, "0", "torch.flatten")
    return True


def _masked_fill(b: Builder, rng) -> bool:
    mask = b.add_input("mask", f"torch.rand({', '.join(b.shape)}) > 0.5", b.shape)
    value = _choice(rng, [0.0, -1.0, 1.0])
    return _same(b, f"x = torch.masked_fill(x, {mask}, {value})", "torch.masked_fill", 1)


def _diff(b: Builder, rng) -> bool:
    dim = _nonbatch_dim(b, rng)
    if min(b.both(b.shape[dim])) < 3:
        return False
    new = list(b.shape)
    new[dim] = f"{wrap(b.shape[dim])} - 1"
    b.emit(f"x = torch.diff(x, dim={dim})", new, numel(b.shape), "torch.diff")
    return True


# -- matmul -----------------------------------------------------------------------------------


def _new_features(b: Builder, rng) -> str:
    return b.const("out_features", b.pick(rng, "features"))


def _linear(b: Builder, rng) -> bool:
    fin = b.param("in_features", b.shape[-1])
    out = _new_features(b, rng)
    fout = b.param("out_features", out)
    name = b.attr("linear")
    b.init_lines.append(f"{name} = nn.Linear({fin}, {fout}, bias={bool(rng.integers(2))})")
    flops = f"2 * {numel(b.shape)} * {out}"
    b.emit(f"x = {name}(x)", b.shape[:-1] + [out], flops, "nn.Linear")
    return True


def _bilinear(b: Builder, rng) -> bool:
    if min(b.both(b.shape[-1])) > 1024 or b.value(b.shape[-1], 1) > 256:
        return False
    fin = b.param("in_features", b.shape[-1])
    out = b.const("out_features", (int(_choice(rng, [64, 128, 256])), 32))
    fout = b.param("out_features", out)
    other = b.add_input("y", f"torch.randn({', '.join(b.shape)})", b.shape)
    name = b.attr("bilinear")
    b.init_lines.append(f"{name} = nn.Bilinear({fin}, {fin}, {fout})")
    flops = f"2 * {numel(b.shape)} * {wrap(b.shape[-1])} * {out}"
    b.emit(f"x = {name}(x, {other})", b.shape[:-1] + [out], flops, "nn.Bilinear")
    return True


def _weight_matmul(fn: str) -> Rule:
    def rule(b: Builder, rng) -> bool:
        fin = b.param("in_features", b.shape[-1])
        out = _new_features(b, rng)
        fout = b.param("out_features", out)
        name = b.attr("weight")
        b.init_lines.append(f"{name} = nn.Parameter(torch.randn({fin}, {fout}) / {fin} ** 0.5)")
        if fn == "matmul":
            line = f"x = torch.matmul(x, {name})"
        elif fn == "einsum":
            line = f'x = torch.einsum("...k,kn->...n", x, {name})'
        else:  # addmm: 2-D only
            bias = b.attr("bias")
            b.init_lines.append(f"{bias} = nn.Parameter(torch.randn({fout}) * 0.1)")
            line = f"x = torch.addmm({bias}, x, {name})"
        b.emit(line, b.shape[:-1] + [out], f"2 * {numel(b.shape)} * {out}", f"torch.{fn}")
        return True

    return rule


def _batched_matmul(fn: str) -> Rule:
    def rule(b: Builder, rng) -> bool:
        out = _new_features(b, rng)
        shape = [b.shape[0], b.shape[2], out]
        other = b.add_input(
            "w", f"torch.randn({', '.join(shape)}) / {wrap(b.shape[2])} ** 0.5", shape
        )
        new = [b.shape[0], b.shape[1], out]
        if fn == "bmm":
            line = f"x = torch.bmm(x, {other})"
        else:
            bias = b.add_input("bias", f"torch.randn({', '.join(new)})", new)
            line = f"x = torch.baddbmm({bias}, x, {other}, beta=0.5)"
        b.emit(line, new, f"2 * {numel(b.shape)} * {out}", f"torch.{fn}")
        return True

    return rule


# -- convolutions and pooling -------------------------------------------------------------------


def _conv(nd: int, transposed: bool) -> Rule:
    cls = f"ConvTranspose{nd}d" if transposed else f"Conv{nd}d"

    def rule(b: Builder, rng) -> bool:
        cin = b.param("in_channels", b.shape[1])
        out = b.const("out_channels", b.pick(rng, "channels"))
        cout = b.param("out_channels", out)
        if transposed:
            k, s, p = int(_choice(rng, [2, 3, 4])), int(_choice(rng, [1, 2])), 0
        else:
            k = int(_choice(rng, [1, 3, 5] if nd < 3 else [1, 3]))
            s = int(_choice(rng, [1, 1, 2]))
            p = int(_choice(rng, [0, k // 2]))
        new = [b.shape[0], out]
        for d in b.shape[2:]:
            if transposed:
                new.append(f"({wrap(d)} - 1) * {s} + {k}")
            else:
                new.append(f"({wrap(d)} + {2 * p} - {k}) // {s} + 1")
        name = b.attr("conv")
        bias = bool(rng.integers(2))
        b.init_lines.append(
            f"{name} = nn.{cls}({cin}, {cout}, kernel_size={k}, stride={s}, padding={p}, "
            f"bias={bias})"
        )
        if transposed:
            flops = f"2 * {numel(b.shape)} * {out} * {k**nd}"
        else:
            flops = f"2 * {numel(new)} * {wrap(b.shape[1])} * {k**nd}"
        b.emit(f"x = {name}(x)", new, flops, f"nn.{cls}")
        return min(min(b.both(d)) for d in new[2:]) >= 2

    return rule


def _pool(kind: str, nd: int) -> Rule:
    cls = f"{kind}{nd}d"

    def rule(b: Builder, rng) -> bool:
        k = int(_choice(rng, [2, 3]))
        s = int(_choice(rng, [k, 2]))
        new = b.shape[:2] + [f"({wrap(d)} - {k}) // {s} + 1" for d in b.shape[2:]]
        args = f"kernel_size={k}, stride={s}"
        if kind == "LPPool":
            args = f"norm_type=2, {args}"
        name = b.attr("pool")
        b.init_lines.append(f"{name} = nn.{cls}({args})")
        b.emit(f"x = {name}(x)", new, f"{k**nd} * {numel(new)}", f"nn.{cls}")
        return min(min(b.both(d)) for d in new[2:]) >= 2

    return rule


def _adaptive_pool(kind: str, nd: int) -> Rule:
    cls = f"Adaptive{kind}Pool{nd}d"

    def rule(b: Builder, rng) -> bool:
        size = int(_choice(rng, [1, 2, 4, 8]))
        if min(min(b.both(d)) for d in b.shape[2:]) < 2 * size:
            return False
        name = b.attr("pool")
        b.init_lines.append(f"{name} = nn.{cls}({size})")
        new = b.shape[:2] + [str(size)] * nd
        b.emit(f"x = {name}(x)", new, numel(b.shape), f"nn.{cls}")
        return True

    return rule


def _fractional_pool(nd: int) -> Rule:
    def rule(b: Builder, rng) -> bool:
        name = b.attr("pool")
        b.init_lines.append(f"{name} = nn.FractionalMaxPool{nd}d(2, output_ratio=0.5)")
        new = b.shape[:2] + [f"int({wrap(d)} * 0.5)" for d in b.shape[2:]]
        b.emit(f"x = {name}(x)", new, numel(b.shape), f"nn.FractionalMaxPool{nd}d")
        return min(min(b.both(d)) for d in new[2:]) >= 2

    return rule


# -- normalisation ------------------------------------------------------------------------------


def _channel_norm(cls: str) -> Rule:
    def rule(b: Builder, rng) -> bool:
        spatial = [min(b.both(d)) for d in b.shape[2:]]
        if cls.startswith("Instance") and (not spatial or min(spatial) < 2):
            return False
        size = b.param("num_features", b.shape[1])
        name = b.attr("norm")
        b.init_lines.append(f"{name} = nn.{cls}({size}, affine=True)")
        return _same(b, f"x = {name}(x)", f"nn.{cls}", 6)

    return rule


def _layer_norm(cls: str) -> Rule:
    def rule(b: Builder, rng) -> bool:
        if min(b.both(b.shape[-1])) < 2:
            return False
        size = b.param("normalized_shape", b.shape[-1])
        name = b.attr("norm")
        b.init_lines.append(f"{name} = nn.{cls}({size})")
        return _same(b, f"x = {name}(x)", f"nn.{cls}", 6)

    return rule


def _group_norm(b: Builder, rng) -> bool:
    groups = int(_choice(rng, [2, 4, 8]))
    if any(v % groups or v == groups for v in b.both(b.shape[1])):
        return False
    size = b.param("num_channels", b.shape[1])
    name = b.attr("norm")
    b.init_lines.append(f"{name} = nn.GroupNorm({groups}, {size})")
    return _same(b, f"x = {name}(x)", "nn.GroupNorm", 6)


def _lrn(b: Builder, rng) -> bool:
    name = b.attr("norm")
    b.init_lines.append(f"{name} = nn.LocalResponseNorm({int(_choice(rng, [2, 3, 5]))})")
    return _same(b, f"x = {name}(x)", "nn.LocalResponseNorm", 8)


def _normalize(b: Builder, rng) -> bool:
    dim = _nonbatch_dim(b, rng)
    if min(b.both(b.shape[dim])) < 2:
        return False
    return _same(b, f"x = F.normalize(x, p=2.0, dim={dim})", "F.normalize", 4)


# -- losses (reduction="none", so outputs stay per element or per sample) ------------------------

TARGETS = {
    "randn": "torch.randn({shape})",
    "rand": "torch.rand({shape})",
    "sign": "torch.randint(0, 2, ({shape},)).float() * 2 - 1",
    "binary": "torch.randint(0, 2, ({shape},)).float()",
    "positive": "torch.rand({shape}) + 0.1",
}


def _elementwise_loss(cls: str, target: str, args: str = "") -> Rule:
    def rule(b: Builder, rng) -> bool:
        shape = ", ".join(b.shape)
        tgt = b.add_input("target", TARGETS[target].format(shape=shape), b.shape)
        name = b.attr("loss")
        sep = ", " if args else ""
        b.init_lines.append(f"{name} = nn.{cls}({args}{sep}reduction='none')")
        return _same(b, f"x = {name}(x, {tgt})", f"nn.{cls}", 4)

    return rule


def _gaussian_nll(b: Builder, rng) -> bool:
    shape = ", ".join(b.shape)
    tgt = b.add_input("target", f"torch.randn({shape})", b.shape)
    var = b.add_input("var", f"torch.rand({shape}) + 0.1", b.shape)
    name = b.attr("loss")
    b.init_lines.append(f"{name} = nn.GaussianNLLLoss(reduction='none')")
    return _same(b, f"x = {name}(x, {tgt}, {var})", "nn.GaussianNLLLoss", 6)


def _pair_loss(cls: str, call: str, ctor: str, per_sample: bool, sign_target: bool) -> Rule:
    def rule(b: Builder, rng) -> bool:
        if per_sample and b.rank != 2:
            return False
        shape = ", ".join(b.shape)
        other = b.add_input("y", f"torch.randn({shape})", b.shape)
        extra = ""
        if sign_target:
            tshape = b.shape[:1] if per_sample else b.shape
            sign = TARGETS["sign"].format(shape=", ".join(tshape))
            extra = ", " + b.add_input("target", sign, tshape)
        name = b.attr("loss")
        b.init_lines.append(f"{name} = nn.{cls}({ctor})")
        new = b.shape[:1] if per_sample else list(b.shape)
        b.emit(
            f"x = {name}({call.format(other=other)}{extra})",
            new,
            f"4 * {numel(b.shape)}",
            f"nn.{cls}",
        )
        return True

    return rule


def _class_loss(cls: str) -> Rule:
    def rule(b: Builder, rng) -> bool:
        if b.rank != 2:
            return False
        tgt = b.add_input("target", f"torch.randint(0, {b.shape[1]}, ({b.shape[0]},))", b.shape[:1])
        name = b.attr("loss")
        b.init_lines.append(f"{name} = nn.{cls}(reduction='none')")
        b.emit(f"x = {name}(x, {tgt})", b.shape[:1], f"4 * {numel(b.shape)}", f"nn.{cls}")
        return True

    return rule


def _multilabel(b: Builder, rng) -> bool:
    tgt = b.add_input("target", TARGETS["binary"].format(shape=", ".join(b.shape)), b.shape)
    name = b.attr("loss")
    b.init_lines.append(f"{name} = nn.MultiLabelSoftMarginLoss(reduction='none')")
    b.emit(
        f"x = {name}(x, {tgt})", b.shape[:1], f"6 * {numel(b.shape)}", "nn.MultiLabelSoftMarginLoss"
    )
    return True


def _triplet(b: Builder, rng) -> bool:
    shape = ", ".join(b.shape)
    pos = b.add_input("positive", f"torch.randn({shape})", b.shape)
    neg = b.add_input("negative", f"torch.randn({shape})", b.shape)
    name = b.attr("loss")
    b.init_lines.append(f"{name} = nn.TripletMarginLoss(margin=1.0, reduction='none')")
    b.emit(
        f"x = {name}(x, {pos}, {neg})", b.shape[:1], f"6 * {numel(b.shape)}", "nn.TripletMarginLoss"
    )
    return True


def _cosine_similarity(b: Builder, rng) -> bool:
    if min(b.both(b.shape[1])) < 4:
        return False
    other = b.add_input("y", f"torch.randn({', '.join(b.shape)})", b.shape)
    name = b.attr("similarity")
    b.init_lines.append(f"{name} = nn.CosineSimilarity(dim=1)")
    new = b.shape[:1] + b.shape[2:]
    b.emit(f"x = {name}(x, {other})", new, f"6 * {numel(b.shape)}", "nn.CosineSimilarity")
    return True


# -- attention ----------------------------------------------------------------------------------


def _sdpa(b: Builder, rng) -> bool:
    batch, heads, seq, dim = b.shape
    if max(b.both(dim)) > 256 or min(b.both(seq)) < 8:
        return False
    shape = ", ".join(b.shape)
    k = b.add_input("k", f"torch.randn({shape})", b.shape)
    v = b.add_input("v", f"torch.randn({shape})", b.shape)
    causal = bool(rng.integers(2))
    flops = f"4 * {numel(b.shape)} * {wrap(seq)}"
    line = f"x = F.scaled_dot_product_attention(x, {k}, {v}, is_causal={causal})"
    b.emit(line, b.shape, flops, "F.scaled_dot_product_attention")
    return True


def _mha(b: Builder, rng) -> bool:
    embed = b.shape[2]
    heads = int(_choice(rng, [2, 4, 8]))
    if any(v % heads for v in b.both(embed)) or max(b.both(embed)) > 2048:
        return False
    size = b.param("embed_dim", embed)
    name = b.attr("attn")
    b.init_lines.append(f"{name} = nn.MultiheadAttention({size}, {heads}, batch_first=True)")
    flops = f"8 * {numel(b.shape)} * {wrap(embed)} + 4 * {numel(b.shape)} * {wrap(b.shape[1])}"
    b.emit(f"x = {name}(x, x, x, need_weights=False)[0]", b.shape, flops, "nn.MultiheadAttention")
    return True


# -- dropout (stochastic) ----------------------------------------------------------------------

DROPOUT_RANKS = {
    "Dropout": ANY_RANK,
    "Dropout1d": (3,),
    "Dropout2d": (4,),
    "Dropout3d": (5,),
    "AlphaDropout": ANY_RANK,
    "FeatureAlphaDropout": (4, 5),
}


def _dropout(cls: str) -> Rule:
    def rule(b: Builder, rng) -> bool:
        name = b.attr("dropout")
        b.init_lines.append(f"{name} = nn.{cls}(p=0.2)")
        return _same(b, f"x = {name}(x)", f"nn.{cls}", 1)

    return rule


# -- the catalogue ------------------------------------------------------------------------------


def _entries() -> list[tuple[object, OpSpec]]:
    """(torch target, spec) pairs; a spec is kept only if its target exists in this torch."""
    T, N, F_ = torch, nn, torch.nn.functional  # noqa: N806
    out: list[tuple[object, OpSpec]] = []

    def add(target, *args, **kwargs):
        out.append((target, OpSpec(*args, **kwargs)))

    for cls in torch.nn.modules.activation.__all__:
        if cls in ACTIVATION_ARGS:
            rule = _module_same(cls, ACTIVATION_ARGS[cls], cls.lower())
            add(
                getattr(N, cls, None),
                f"nn.{cls}",
                "activation",
                ANY_RANK,
                rule,
                stochastic=cls in STOCHASTIC_MODULES,
            )
    add(getattr(N, "GLU", None), "nn.GLU", "activation", (2, 3, 4, 5), _glu)
    for cls in ("Softmax", "LogSoftmax", "Softmin"):
        add(getattr(N, cls, None), f"nn.{cls}", "softmax", (2, 3, 4, 5), _softmax_module(cls))
    add(getattr(N, "Softmax2d", None), "nn.Softmax2d", "softmax", (4,), _softmax2d)
    add(
        getattr(F_, "gumbel_softmax", None),
        "F.gumbel_softmax",
        "softmax",
        (2, 3),
        _gumbel,
        stochastic=True,
    )
    for fn, guard in POINTWISE.items():
        add(getattr(T, fn, None), f"torch.{fn}", "elementwise", ANY_RANK, _pointwise(fn, guard))
    for fn, args in SCALAR_POINTWISE.items():
        add(
            getattr(T, fn, None),
            f"torch.{fn}",
            "elementwise",
            ANY_RANK,
            _scalar_pointwise(fn, args),
        )
    for fn, (init, operand) in PARAM_BINARY.items():
        add(
            getattr(T, fn, None),
            f"torch.{fn}",
            "elementwise",
            (2, 3, 4, 5),
            _param_binary(fn, init, operand),
        )
    reductions = {
        "sum": ("torch.sum(x, dim={dim}, keepdim={keep})", {}),
        "mean": ("torch.mean(x, dim={dim}, keepdim={keep})", {}),
        "amax": ("torch.amax(x, dim={dim}, keepdim={keep})", {}),
        "amin": ("torch.amin(x, dim={dim}, keepdim={keep})", {}),
        "max": ("torch.max(x, dim={dim}, keepdim={keep}).values", {}),
        "min": ("torch.min(x, dim={dim}, keepdim={keep}).values", {}),
        "std": ("torch.std(x, dim={dim}, keepdim={keep})", {"min_size": 4}),
        "var": ("torch.var(x, dim={dim}, keepdim={keep})", {"min_size": 4}),
        "logsumexp": ("torch.logsumexp(x, dim={dim}, keepdim={keep})", {}),
        "median": ("torch.median(x, dim={dim}, keepdim={keep}).values", {"min_size": 3}),
        "argmax": ("torch.argmax(x, dim={dim})", {"integer": True}),
        "argmin": ("torch.argmin(x, dim={dim})", {"integer": True}),
    }
    for fn, (call, kw) in reductions.items():
        add(
            getattr(T, fn, None),
            f"torch.{fn}",
            "reduction",
            (2, 3, 4, 5),
            _reduction(call, f"torch.{fn}", **kw),
            terminal=bool(kw.get("integer")),
        )
    add(
        getattr(T.linalg, "vector_norm", None),
        "torch.linalg.vector_norm",
        "reduction",
        (2, 3, 4, 5),
        _reduction(
            "torch.linalg.vector_norm(x, dim={dim}, keepdim={keep})", "torch.linalg.vector_norm"
        ),
    )
    scans = {
        "cumsum": "torch.cumsum(x, dim={dim})",
        "cummax": "torch.cummax(x, dim={dim}).values",
        "cummin": "torch.cummin(x, dim={dim}).values",
        "logcumsumexp": "torch.logcumsumexp(x, dim={dim})",
    }
    for fn, call in scans.items():
        add(
            getattr(T, fn, None),
            f"torch.{fn}",
            "indexing",
            (2, 3, 4, 5),
            _scan(call, f"torch.{fn}"),
        )
    indexing = [
        ("flip", _flip, (2, 3, 4, 5)),
        ("roll", _roll, (2, 3, 4, 5)),
        ("gather", _gather, (2, 3, 4, 5)),
        ("index_select", _index_select, (2, 3, 4, 5)),
        ("narrow", _narrow, (2, 3, 4, 5)),
        ("topk", _topk, (2, 3, 4, 5)),
        ("sort", _sort, (2, 3, 4, 5)),
        ("tril", _tri("tril"), (3, 4, 5)),
        ("triu", _tri("triu"), (3, 4, 5)),
        ("transpose", _transpose, (3, 4, 5)),
        ("flatten", _flatten, (3, 4, 5)),
        ("masked_fill", _masked_fill, (2, 3, 4, 5)),
        ("diff", _diff, (2, 3, 4, 5)),
    ]
    for fn, rule, ranks in indexing:
        add(
            getattr(T, fn, None),
            f"torch.{fn}",
            "indexing",
            ranks,
            rule,
            data_movement=fn in DATA_MOVEMENT,
        )
    add(N.Linear, "nn.Linear", "matmul", (2, 3, 4), _linear)
    add(getattr(N, "Bilinear", None), "nn.Bilinear", "matmul", (2,), _bilinear)
    add(T.matmul, "torch.matmul", "matmul", (2, 3, 4), _weight_matmul("matmul"))
    add(T.einsum, "torch.einsum", "matmul", (2, 3, 4), _weight_matmul("einsum"))
    add(T.addmm, "torch.addmm", "matmul", (2,), _weight_matmul("addmm"))
    add(T.bmm, "torch.bmm", "matmul", (3,), _batched_matmul("bmm"))
    add(T.baddbmm, "torch.baddbmm", "matmul", (3,), _batched_matmul("baddbmm"))
    for nd in (1, 2, 3):
        for transposed in (False, True):
            cls = f"ConvTranspose{nd}d" if transposed else f"Conv{nd}d"
            add(getattr(N, cls, None), f"nn.{cls}", "conv", (nd + 2,), _conv(nd, transposed))
        for kind in ("MaxPool", "AvgPool", "LPPool"):
            add(
                getattr(N, f"{kind}{nd}d", None),
                f"nn.{kind}{nd}d",
                "pooling",
                (nd + 2,),
                _pool(kind, nd),
            )
        for kind in ("Avg", "Max"):
            cls = f"Adaptive{kind}Pool{nd}d"
            add(getattr(N, cls, None), f"nn.{cls}", "pooling", (nd + 2,), _adaptive_pool(kind, nd))
        add(
            getattr(N, f"BatchNorm{nd}d", None),
            f"nn.BatchNorm{nd}d",
            "norm",
            (2, 3) if nd == 1 else (nd + 2,),
            _channel_norm(f"BatchNorm{nd}d"),
        )
        add(
            getattr(N, f"InstanceNorm{nd}d", None),
            f"nn.InstanceNorm{nd}d",
            "norm",
            (nd + 2,),
            _channel_norm(f"InstanceNorm{nd}d"),
        )
    for nd in (2, 3):
        add(
            getattr(N, f"FractionalMaxPool{nd}d", None),
            f"nn.FractionalMaxPool{nd}d",
            "pooling",
            (nd + 2,),
            _fractional_pool(nd),
            stochastic=True,
        )
    add(N.LayerNorm, "nn.LayerNorm", "norm", (2, 3, 4, 5), _layer_norm("LayerNorm"))
    add(getattr(N, "RMSNorm", None), "nn.RMSNorm", "norm", (2, 3, 4, 5), _layer_norm("RMSNorm"))
    add(N.GroupNorm, "nn.GroupNorm", "norm", (3, 4, 5), _group_norm)
    add(N.LocalResponseNorm, "nn.LocalResponseNorm", "norm", (3, 4, 5), _lrn)
    add(F_.normalize, "F.normalize", "norm", (2, 3, 4, 5), _normalize)
    elementwise_losses = [
        ("MSELoss", "randn", ""),
        ("L1Loss", "randn", ""),
        ("SmoothL1Loss", "randn", "beta=0.5"),
        ("HuberLoss", "randn", "delta=0.5"),
        ("BCEWithLogitsLoss", "rand", ""),
        ("SoftMarginLoss", "sign", ""),
        ("KLDivLoss", "positive", ""),
        ("PoissonNLLLoss", "positive", "log_input=True"),
        ("HingeEmbeddingLoss", "sign", "margin=1.0"),
    ]
    for cls, target, args in elementwise_losses:
        add(
            getattr(N, cls, None),
            f"nn.{cls}",
            "loss",
            (2, 3, 4),
            _elementwise_loss(cls, target, args),
        )
    add(N.GaussianNLLLoss, "nn.GaussianNLLLoss", "loss", (2, 3, 4), _gaussian_nll)
    add(
        N.MarginRankingLoss,
        "nn.MarginRankingLoss",
        "loss",
        (2, 3, 4),
        _pair_loss("MarginRankingLoss", "x, {other}", "margin=0.5, reduction='none'", False, True),
    )
    add(
        N.CosineEmbeddingLoss,
        "nn.CosineEmbeddingLoss",
        "loss",
        (2,),
        _pair_loss("CosineEmbeddingLoss", "x, {other}", "margin=0.2, reduction='none'", True, True),
    )
    add(
        N.PairwiseDistance,
        "nn.PairwiseDistance",
        "loss",
        (2,),
        _pair_loss("PairwiseDistance", "x, {other}", "p=2.0", True, False),
    )
    add(N.CosineSimilarity, "nn.CosineSimilarity", "loss", (2, 3, 4), _cosine_similarity)
    add(N.CrossEntropyLoss, "nn.CrossEntropyLoss", "loss", (2,), _class_loss("CrossEntropyLoss"))
    add(N.NLLLoss, "nn.NLLLoss", "loss", (2,), _class_loss("NLLLoss"))
    add(N.MultiLabelSoftMarginLoss, "nn.MultiLabelSoftMarginLoss", "loss", (2,), _multilabel)
    add(N.TripletMarginLoss, "nn.TripletMarginLoss", "loss", (2,), _triplet)
    add(
        getattr(F_, "scaled_dot_product_attention", None),
        "F.scaled_dot_product_attention",
        "attention",
        (4,),
        _sdpa,
    )
    add(N.MultiheadAttention, "nn.MultiheadAttention", "attention", (3,), _mha)
    for cls in torch.nn.modules.dropout.__all__:
        if cls in DROPOUT_RANKS:
            add(
                getattr(N, cls, None),
                f"nn.{cls}",
                "dropout",
                DROPOUT_RANKS[cls],
                _dropout(cls),
                stochastic=True,
            )
    return out


def _glu(b: Builder, rng) -> bool:
    if any(v % 2 or v < 4 for v in b.both(b.shape[-1])):
        return False
    name = b.attr("glu")
    b.init_lines.append(f"{name} = nn.GLU(dim=-1)")
    new = b.shape[:-1] + [f"{wrap(b.shape[-1])} // 2"]
    b.emit(f"x = {name}(x)", new, f"4 * {numel(new)}", "nn.GLU")
    return True


@functools.lru_cache(maxsize=1)
def catalogue() -> tuple[OpSpec, ...]:
    """Every usable operator of the installed torch, in a fixed order."""
    specs, seen = [], set()
    for target, spec in _entries():
        if target is None or spec.name in seen:
            continue
        seen.add(spec.name)
        specs.append(spec)
    return tuple(specs)


def get_op(name: str) -> OpSpec:
    """The catalogue entry called `name` (e.g. "nn.Conv2d")."""
    for spec in catalogue():
        if spec.name == name:
            return spec
    raise KeyError(f"no operator {name!r} in the catalogue")


def family_counts() -> dict[str, int]:
    """Number of operators per family."""
    counts = dict.fromkeys(FAMILIES, 0)
    for spec in catalogue():
        counts[spec.family] += 1
    return counts
