"""Refuse PyTorch compute inside `ModelNew.forward`, at the dispatcher.

A `TorchDispatchMode` sees every aten op, whether it comes from `torch.*`, `F.*`, a tensor
method, `@`, `torch.ops.aten`, or an `at::` call made inside a C++ extension. Allowed (ALLOWED_OPS):
allocation and fills (`empty`, `zeros`, `ones`, `full`, their `_like`/`new_` forms, `arange`,
`torch.tensor`), views and metadata, copies that keep the dtype (`clone`, `.contiguous()`,
`.to(device)`, `.cuda()`, `.cpu()`, `copy_`), and reading a scalar (`.item()`). A dtype
conversion (`.half()`, `.to(torch.bfloat16)`, `.double()`) is compute: the kernel does it. The
candidate's own kernels, called through pybind11, never reach the dispatcher at all.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cuda_gym.judge.runner import _converts_dtype as runner_converts_dtype

# Allocation, filling freshly allocated memory, views and metadata.
ALLOWED_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::zeros",
        "aten::zeros_like",
        "aten::new_zeros",
        "aten::zero_",
        "aten::fill_",
        "aten::full",
        "aten::full_like",
        "aten::new_full",
        "aten::ones",
        "aten::ones_like",
        "aten::new_ones",
        "aten::view",
        "aten::_unsafe_view",
        "aten::reshape",
        "aten::_reshape_alias",
        "aten::as_strided",
        "aten::expand",
        "aten::permute",
        "aten::transpose",
        "aten::t",
        "aten::squeeze",
        "aten::unsqueeze",
        "aten::flatten",
        "aten::unflatten",
        "aten::slice",
        "aten::select",
        "aten::narrow",
        "aten::split",
        "aten::split_with_sizes",
        "aten::chunk",
        "aten::unbind",
        "aten::alias",
        "aten::detach",
        "aten::lift_fresh",
        "aten::clone",
        "aten::contiguous",
        "aten::copy_",
        # .to(device), .cuda(), .cpu(), .to(memory_format=...): refused if the dtype changes.
        "aten::_to_copy",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
        # .item(), float(t), `if t:`: a scalar read back to Python.
        "aten::_local_scalar_dense",
        # torch.tensor(...), torch.arange(...), torch.scalar_tensor(...): new values, no inputs.
        "aten::lift_fresh_copy",
        "aten::scalar_tensor",
        "aten::arange",
        "aten::empty_permuted",
        "aten::diagonal",
        "aten::unfold",
        "aten::expand_as",
        "aten::view_as",
        "aten::resize_",
        "aten::sym_size",
        "aten::sym_stride",
        "aten::sym_numel",
        "aten::sym_storage_offset",
        "aten::is_contiguous",
        "aten::_has_compatible_shallow_copy_type",
        # The in-place forms of views: metadata only (out.unsqueeze_(1) for keepdim).
        "aten::unsqueeze_",
        "aten::squeeze_",
        "aten::t_",
        "aten::transpose_",
        "aten::as_strided_",
        "aten::is_pinned",
    }
)
# Copies of tensor data. Allowed where a task computes something (kernels lay out their inputs
# and outputs with them); refused where the task's reference does nothing but move data
# (`data_movement`, from the probe): there a copy is the task's computation.
COPY_OPS = frozenset(
    {
        "aten::clone",
        "aten::copy_",
        "aten::_to_copy",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
        "aten::lift_fresh_copy",
    }
)
# Ops that only move data and that the allowed ones can express (a pad is zeros and a copy into
# a slice, a concatenation copies into slices, a repeat copies an expanded view): a reference
# made of these and the allowed ops alone is a data-movement task (`moves_data_only`).
MOVEMENT_OPS = frozenset(
    {
        "aten::constant_pad_nd",
        "aten::pad",
        "aten::cat",
        "aten::concat",
        "aten::concatenate",
        "aten::stack",
        "aten::hstack",
        "aten::vstack",
        "aten::dstack",
        "aten::column_stack",
        "aten::roll",
        "aten::repeat",
        "aten::tile",
        "aten::flip",
        "aten::narrow_copy",
        "aten::reflection_pad1d",
        "aten::reflection_pad2d",
        "aten::reflection_pad3d",
        "aten::replication_pad1d",
        "aten::replication_pad2d",
        "aten::replication_pad3d",
        "aten::_pad_circular",
        *(
            f"aten::{view}_copy"
            for view in (
                "permute", "transpose", "t", "view", "expand", "slice", "select", "unfold",
                "diagonal", "as_strided", "squeeze", "unsqueeze", "split", "split_with_sizes",
                "unbind", "alias", "detach", "_reshape_alias", "_unsafe_view", "unflatten",
            )
        ),
    }
)
# The published rule lets the candidate's extension call cuBLAS GEMMs and cuDNN convolutions;
# a task opts in with JudgeConfig(allow_vendor_libraries=True).
VENDOR_LIBRARY_OPS = frozenset(
    {
        "aten::mm",
        "aten::bmm",
        "aten::addmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::convolution",
        "aten::_convolution",
        "aten::cudnn_convolution",
        "aten::conv2d",
        "aten::conv1d",
        "aten::conv3d",
        "aten::linear",
    }
)


ALLOWED_SUMMARY = (
    "allowed: allocation (empty, zeros, ones, full, *_like, new_*, arange, torch.tensor), views "
    "and metadata, copies that keep the dtype (clone, contiguous, .to(device), .cuda(), .cpu(), "
    "copy_) and .item()"
)


class FallbackRefused(RuntimeError):
    """Raised inside forward when it calls a PyTorch compute op."""


class FallbackBan(TorchDispatchMode):
    """Dispatch mode that records and refuses PyTorch compute ops.

    Violations are recorded in `self.violations` before the error is raised, so a candidate that
    catches the error (e.g. in C++) is still caught.

    Args:
        allow_vendor_libraries: Also allow GEMM and convolution ops (cuBLAS/cuDNN).
    """

    def __init__(self, allow_vendor_libraries: bool = False) -> None:
        super().__init__()
        self.allowed = ALLOWED_OPS | (VENDOR_LIBRARY_OPS if allow_vendor_libraries else frozenset())
        self.violations: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name not in self.allowed or _converts_dtype(name, args, kwargs):
            if len(self.violations) < 20:
                self.violations.append(str(func))
            raise FallbackRefused(
                f"PyTorch op {func} called inside ModelNew.forward: compute must be done by "
                f"your own kernels ({ALLOWED_SUMMARY})"
            )
        return func(*args, **kwargs)


def _skip_dynamo_wrapper(mode_cls: type) -> None:
    """Keep the first dispatch from importing torch._dynamo (seconds per worker process).

    TorchDispatchMode wraps every subclass's __torch_dispatch__ in torch._disable_dynamo, which
    imports torch._dynamo on the first call to build the "not traced by dynamo" wrapper. The
    ban never runs under torch.compile (the static checks refuse it, and baselines are compiled
    in another process without the ban), so the wrapper is not needed: marking the function as
    its own wrapper makes the first call go straight to it. Where torch's layout differs, this
    does nothing and the import just happens.
    """
    raw = getattr(mode_cls.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
    if callable(raw):
        setattr(raw, "__dynamo_disable", raw)


_skip_dynamo_wrapper(FallbackBan)


class OpRecorder(TorchDispatchMode):
    """Records whether a forward computes (the probe's use on the reference).

    `computes` stays False for a forward made of allocation, fills, views, copies and ops that
    only move data (MOVEMENT_OPS: a transpose and a pad): its task is data movement.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()
        self.computes = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        self.ops.add(name)
        if (name not in ALLOWED_OPS and name not in MOVEMENT_OPS) or _converts_dtype(
            name, args, kwargs
        ):
            self.computes = True
        return func(*args, **kwargs)


_skip_dynamo_wrapper(OpRecorder)


def moves_data_only(model, inputs: list) -> bool:
    """Whether `model(*inputs)` computes nothing: it only allocates, fills, views and moves.

    False where the forward cannot run under a dispatch mode (it is then judged as any task).
    """
    try:
        with OpRecorder() as recorder:
            model(*inputs)
    except Exception:  # e.g. an op with no Python dispatch support
        return False
    return bool(recorder.ops) and not recorder.computes


class NoBan:
    """The ban lifted: a no-op context with no violations.

    Used only when the judge runs a task's reference as its own candidate (the harness's
    sanity run, `Judge.evaluate_reference_as_candidate`); never for agent code.
    """

    def __init__(self) -> None:
        self.violations: list[str] = []

    def __enter__(self) -> NoBan:
        return self

    def __exit__(self, *exc_info) -> None:
        return None


def _converts_dtype(name: str, args, kwargs: dict) -> bool:
    """A copy whose result has another dtype than its source (the runner's rule, one copy)."""
    return runner_converts_dtype(torch, name, args, kwargs)
