"""A task's contract, read off its own draws: which inputs a transform may touch, and fp32's error.

Two things the probe learns once per task (trusted side) and the trials then rely on:

1. **Input invariants.** The task's `get_inputs()` is drawn under several seeds. Every property
   that holds in all draws is an invariant of that input: its zero pattern (triangular, banded,
   masked: transforms keep zeros by construction, and the check confirms it), symmetry, integer
   or few distinct values (indices, masks, one-hot), sign, value range, rows summing to 1, rows
   of unit norm, sortedness. A distribution transform (judge/inputs.py) is used on an input only
   where its result keeps every invariant; elsewhere that input stays as drawn. A task may widen
   or narrow this in a top-level `JUDGE_OPTIONS = {"input_domain": ...}`: "observed" (the
   default: values stay within the range of the draws), "real" (the input stands for any real
   values: transforms may also scale it up, structural invariants still hold), or "as_is" (never
   transformed); one string for every input or a list with one per input.

2. **Accumulation units.** Strict mode's bound for fp32 outputs (judge/compare.py) must admit any
   correct fp32 algorithm. Its scale is `u * units * M`, with u = 2^-24, M the largest magnitude
   of the float64 pass on |inputs| with |parameters| (for sums, dot products, convolutions and
   scans: the sum of the absolute values of the terms), and `units` counted here from the ops of
   one float64 forward pass: max(LAMBDA sqrt(n), STAGNATION n) for the total accumulation
   length n of reductions, matmuls, convolutions and scans (the first is the probabilistic
   rounding-error bound of Higham and Mary, 2019: |error| <= lambda sqrt(n) u sum|terms| with
   overwhelming probability for any summation order whose errors are unbiased; the second
   covers the biased errors of a serial sum that stagnates, from n of about 6400 on),
   TRANSCENDENTAL_ULPS per transcendental op (fast-math intrinsics such as `__expf`), and one per
   other arithmetic op.
"""

from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cuda_gym.judge.inputs import (
    DISTRIBUTIONS,
    KEEP,
    OBSERVED,
    REAL,
    draw_inputs,
    transform_inputs,
)

DOMAINS = ("observed", "real", "as_is")
_DOMAIN_MASK = {"observed": OBSERVED, "real": REAL, "as_is": KEEP}
# As-is draws the probe takes to read the invariants (the first is the probe's own seed).
DRAWS = 3
# Elements looked at for the costly invariants (distinct values, sortedness) of a large input.
SAMPLE = 1 << 22
DISCRETE_MAX = 16  # at most this many distinct values (in a tensor of more than 4x as many)
NORM_TOL = 1e-3
CHUNK = 1 << 26

LAMBDA = 4.0
# A serial sum of same-sign terms spread over decades drops the terms below half an ulp of the
# running sum (stagnation): a biased error that grows like n, measured at 0.013-0.019 n u M for
# sums and K-loop dot products of 2^11 to 2^20 terms under the wide_range transform.
STAGNATION = 0.05
TRANSCENDENTAL_ULPS = 16.0


def declared_domains(task, n_inputs: int) -> list[str]:
    """Each input's domain from the task module's `JUDGE_OPTIONS["input_domain"]`.

    Raises:
        ValueError: The option is neither one of DOMAINS nor a list of them, one per input.
    """
    options = getattr(task, "JUDGE_OPTIONS", None)
    value = options.get("input_domain", "observed") if isinstance(options, dict) else "observed"
    values = [value] * n_inputs if isinstance(value, str) else value
    if (
        not isinstance(values, (list, tuple))
        or len(values) != n_inputs
        or any(v not in DOMAINS for v in values)
    ):
        raise ValueError(
            f"JUDGE_OPTIONS['input_domain'] must be one of {DOMAINS} or a list of them with one "
            f"entry per input ({n_inputs}), got {value!r}"
        )
    return list(values)


def invariants_of(x) -> dict | None:
    """The invariant properties of one floating-point tensor draw (None for anything else).

    Elementwise checks run in pieces of CHUNK elements (KernelBench inputs reach 8 GiB); the
    costly ones (distinct values, rows) look at the first SAMPLE elements.

    Returns:
        {"props": set of property names, "lo": min, "hi": max} over the finite values.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() < 2:
        return None
    lo, hi, integer = math.inf, -math.inf, True
    flat = x.reshape(-1)  # a copy only where the input is not contiguous
    for start in range(0, flat.numel(), CHUNK):
        part = flat[start : start + CHUNK]
        part = part[torch.isfinite(part)]
        if part.numel():
            lo, hi = min(lo, float(part.min())), max(hi, float(part.max()))
            integer = integer and bool((part == part.round()).all())
    if lo > hi:  # nothing finite
        return None
    props = set()
    if lo >= 0:
        props.add("nonnegative")
    if hi <= 0:
        props.add("nonpositive")
    if integer:
        props.add("integer")
    sample = flat[:SAMPLE]
    if sample.numel() > 4 * DISCRETE_MAX and torch.unique(sample).numel() <= DISCRETE_MAX:
        props.add("discrete")
    if x.dim() >= 2 and x.shape[-1] == x.shape[-2] and torch.equal(x, x.transpose(-1, -2)):
        props.add("symmetric")
    if x.shape[-1] > 1:
        rows = x.reshape(-1, x.shape[-1])[: max(1, SAMPLE // x.shape[-1])].double()
        if bool(((rows.sum(-1) - 1).abs() <= NORM_TOL).all()):
            props.add("rows_sum_to_one")
        if bool(((rows.norm(dim=-1) - 1).abs() <= NORM_TOL).all()):
            props.add("unit_norm_rows")
        steps = rows[:, 1:] - rows[:, :-1]
        if bool((steps >= 0).all()):
            props.add("ascending")
        if bool((steps <= 0).all()):
            props.add("descending")
    return {"props": props, "lo": lo, "hi": hi}


def merge_invariants(a: dict | None, b: dict | None) -> dict | None:
    """The invariants of two draws of one input: properties in both, the range of both."""
    if a is None or b is None:
        return None
    lo, hi = min(a["lo"], b["lo"]), max(a["hi"], b["hi"])
    return {"props": a["props"] & b["props"], "lo": lo, "hi": hi}


def keeps_invariants(original: torch.Tensor, y: torch.Tensor, inv: dict, domain: str) -> bool:
    """Whether a transformed draw `y` (of `original`) keeps every invariant in `inv`."""
    flat_y, flat_x = y.reshape(-1), original.reshape(-1)
    for start in range(0, flat_y.numel(), CHUNK):
        py, px = flat_y[start : start + CHUNK], flat_x[start : start + CHUNK]
        if not bool((torch.isfinite(py) | ~torch.isfinite(px)).all()):
            return False
        if not torch.equal(py == 0, px == 0):  # the zero pattern: triangular, banded, masked
            return False
    now = invariants_of(y)
    if now is None or not inv["props"] <= now["props"]:
        return False
    lo, hi = observed_range(inv)
    if domain == "observed" and (now["lo"] < lo or now["hi"] > hi):
        return False
    return True


def observed_range(inv: dict) -> tuple[float, float]:
    """The draws' range, taken to reach 0 where it ends within 1% of its span from 0.

    torch.rand(n) * 10 draws [0.0004, 9.9996]: its range is [0, 10), and values that shrink
    towards 0 stay in it; torch.rand(n) + 1 draws [1.0003, 1.9998], which stays away from 0.
    """
    lo, hi = inv["lo"], inv["hi"]
    span = hi - lo
    if 0 < lo <= 0.01 * span:
        lo = 0.0
    if -0.01 * span <= hi < 0:
        hi = 0.0
    return lo, hi


def probe_inputs(task, seed: int, device: str) -> dict:
    """The probe's record of the task's inputs: domains, invariants, and masks per distribution.

    Draws `get_inputs()` DRAWS times (seeds `seed`, `seed + 1`, ...), one draw besides the first
    on the device at a time (KernelBench's larger inputs are GiBs).

    Returns:
        {"domains": [...], "invariants": [...], "masks": {distribution: MASK}} (JSON-ready).
    """
    first = draw_inputs(task, seed, device)
    domains = declared_domains(task, len(first))
    invariants = [invariants_of(x) for x in first]
    for j in range(1, DRAWS):
        draw = draw_inputs(task, seed + j, device)
        invariants = [merge_invariants(a, invariants_of(x)) for a, x in zip(invariants, draw)]
        del draw
    masks = {}
    for name in dict.fromkeys(DISTRIBUTIONS):
        if name == "as_is":
            continue
        wanted = "".join(
            _DOMAIN_MASK[d] if inv is not None else KEEP for inv, d in zip(invariants, domains)
        )
        trial = transform_inputs(first, seed, f"{name}@{wanted}")
        masks[name] = "".join(
            KEEP if c == KEEP or not keeps_invariants(x, y, inv, domains[i]) else c
            for i, (c, x, y, inv) in enumerate(zip(wanted, first, trial, invariants))
        )
        del trial
    described = [
        None if inv is None else {"props": sorted(inv["props"]), "lo": inv["lo"], "hi": inv["hi"]}
        for inv in invariants
    ]
    return {"domains": domains, "invariants": described, "masks": masks}


def trial_distribution(name: str, masks: dict[str, str] | None) -> str:
    """The trial spec for `name`: "as_is", or `name@MASK`, or `name` where no masks were probed."""
    if name == "as_is" or masks is None:
        return name
    mask = masks.get(name)
    if mask is None or set(mask) == {KEEP} or not mask:
        return "as_is"
    return f"{name}@{mask}"


# -- accumulation units ----------------------------------------------------------------------

_MATMULS = {"mm": 0, "bmm": 0, "matmul": 0, "dot": 0, "vdot": 0, "mv": 0, "addmm": 1}
_MATMULS.update({"baddbmm": 1, "addbmm": 1, "addmv": 1, "addr": None, "linear": 0})
_CONVOLUTIONS = frozenset(
    "convolution _convolution cudnn_convolution cudnn_convolution_transpose mkldnn_convolution "
    "convolution_overrideable _slow_conv2d_forward slow_conv3d_forward slow_conv_transpose2d "
    "slow_conv_transpose3d conv1d conv2d conv3d".split()
)
_ALONG_DIM = frozenset(
    "cumsum cumprod logcumsumexp _softmax _log_softmax softmax log_softmax".split()
)
_REDUCTIONS = frozenset(
    "sum mean nansum nanmean prod var std var_mean std_mean norm linalg_vector_norm "
    "linalg_norm frobenius_norm logsumexp native_layer_norm native_group_norm native_batch_norm "
    "_native_batch_norm_legit _native_batch_norm_legit_no_training _batch_norm_with_update "
    "avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d "
    "adaptive_avg_pool3d _adaptive_avg_pool2d _adaptive_avg_pool3d mse_loss l1_loss "
    "smooth_l1_loss huber_loss kl_div binary_cross_entropy binary_cross_entropy_with_logits "
    "nll_loss nll_loss_forward nll_loss2d_forward _cdist_forward cosine_similarity "
    "cosine_embedding_loss hinge_embedding_loss margin_ranking_loss triplet_margin_loss "
    "soft_margin_loss multilabel_margin_loss_forward _embedding_bag "
    "_scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_efficient_attention "
    "_scaled_dot_product_flash_attention _scaled_dot_product_cudnn_attention".split()
)
_TRANSCENDENTAL = frozenset(
    "exp exp2 expm1 log log2 log10 log1p sin cos tan tanh sinh cosh asin acos atan atan2 asinh "
    "acosh atanh sigmoid erf erfc erfinv pow sqrt rsqrt reciprocal div gelu silu mish softplus "
    "elu selu celu logit lgamma digamma hardswish hardsigmoid _softmax _log_softmax softmax "
    "log_softmax logsumexp xlogy special_xlog1py sinc log_sigmoid_forward".split()
)
_FREE = frozenset(
    "empty empty_like empty_strided zeros zeros_like ones ones_like full full_like new_empty "
    "new_zeros new_ones new_full view _unsafe_view reshape as_strided expand permute transpose t "
    "squeeze unsqueeze flatten unflatten slice select narrow split split_with_sizes chunk unbind "
    "alias detach clone contiguous copy_ _to_copy lift_fresh lift_fresh_copy arange fill_ zero_ "
    "index_select gather index scatter cat stack max min amax amin argmax argmin relu threshold "
    "clamp clamp_min clamp_max neg abs sign hardtanh maximum minimum where masked_fill "
    "constant_pad_nd reflection_pad1d reflection_pad2d replication_pad1d replication_pad2d "
    "max_pool2d_with_indices max_pool3d_with_indices max_pool1d max_pool2d max_pool3d "
    "adaptive_max_pool2d _local_scalar_dense eq ne lt le gt ge logical_not logical_and "
    "logical_or bitwise_and bitwise_or sort topk cummax cummin embedding native_dropout "
    "bernoulli_ bernoulli rand rand_like randn randn_like pixel_shuffle pixel_unshuffle "
    "upsample_nearest2d flip roll repeat tril triu diagonal unfold diag_embed".split()
)


def _op_name(func) -> str:
    return func._schema.name.split("::")[-1]


def _accumulation_length(name: str, args, kwargs, out) -> int:
    """Terms summed into one output element by one op (0 for none)."""
    if name in _MATMULS and _MATMULS[name] is not None:
        a = args[_MATMULS[name]]
        return int(a.shape[-1]) if isinstance(a, torch.Tensor) and a.dim() else 0
    if name in _CONVOLUTIONS:
        weight = args[1]
        kernel = math.prod(weight.shape[2:])
        transposed = bool(args[6]) if name == "convolution" and len(args) > 6 else False
        transposed = transposed or "transpose" in name
        groups = int(args[8]) if name == "convolution" and len(args) > 8 else 1
        return int(weight.shape[0] // max(groups, 1) if transposed else weight.shape[1]) * kernel
    first = args[0] if args else None
    if not isinstance(first, torch.Tensor):
        return 0
    if name in _ALONG_DIM:
        dim = args[1] if len(args) > 1 and isinstance(args[1], int) else kwargs.get("dim", -1)
        return int(first.shape[dim]) if first.dim() else 1
    if name == "native_layer_norm":
        return math.prod(args[1])
    if name in _REDUCTIONS:
        outs = out if isinstance(out, (tuple, list)) else [out]
        sizes = [o.numel() for o in outs if isinstance(o, torch.Tensor) and o.numel()]
        return max(1, first.numel() // max(min(sizes, default=1), 1))
    return 0


class _OpCounter(TorchDispatchMode):
    """Counts accumulation lengths, transcendental ops and other arithmetic ops of a forward."""

    def __init__(self) -> None:
        super().__init__()
        self.accumulated = 0
        self.transcendental = 0
        self.arithmetic = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = _op_name(func).rstrip("_")
        n = _accumulation_length(name, args, kwargs, out)
        self.accumulated += n
        if name in _TRANSCENDENTAL:
            self.transcendental += 1
        elif not n and name not in _FREE:
            self.arithmetic += 1
        return out


def accumulation_units(model64, inputs64: list) -> float:
    """Strict mode's error units for the task (see the module docstring), from one fp64 pass."""
    counter = _OpCounter()
    with torch.no_grad(), counter:
        model64(*inputs64)
    n = max(counter.accumulated, 1)
    return (
        max(LAMBDA * math.sqrt(n), STAGNATION * n)
        + TRANSCENDENTAL_ULPS * counter.transcendental
        + counter.arithmetic
    )


def magnitudes(model64, inputs: list) -> list[float | None]:
    """Largest finite |value| of each output of the float64 pass on |inputs|, |parameters|.

    For sums, dot products, convolutions and scans that is the sum of the terms' absolute
    values: the scale of any summation order's rounding error. None for a non-tensor output.
    """
    state = {
        k: (v.abs() if v.is_floating_point() else v)
        for k, v in {**dict(model64.named_parameters()), **dict(model64.named_buffers())}.items()
    }
    args = [
        x.double().abs() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
        for x in inputs
    ]
    with torch.no_grad():
        outs = torch.func.functional_call(model64, state, tuple(args))
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    result = []
    for o in outs:
        if not isinstance(o, torch.Tensor) or not o.is_floating_point() or not o.numel():
            result.append(None)
            continue
        a = o.abs()
        a = torch.where(torch.isfinite(a), a, 0)
        result.append(float(a.max()))
    return result


# A module whose |parameters| pass cannot run (a parameter read in a way functional_call does not
# replace, a check on signs) only loses the arithmetic bound; the measured one remains.
_PASS_ERRORS = (RuntimeError, TypeError, ValueError, NotImplementedError, IndexError)


def strict_scales(model64, inputs: list, units) -> list | None:
    """Per output, `(units, magnitude)` for compare's strict bound (None where not a float).

    None when the pass on |inputs| cannot run: strict mode then keeps its measured bound only.
    """
    try:
        found = magnitudes(model64, inputs)
    except _PASS_ERRORS:
        return None
    return [None if m is None else (float(units), m) for m in found]


def try_accumulation_units(model64, inputs64: list) -> float | None:
    """accumulation_units, or None where the counting pass cannot run."""
    try:
        return accumulation_units(model64, inputs64)
    except _PASS_ERRORS:
        return None
