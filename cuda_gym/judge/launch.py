"""Call a plain shared library's `extern "C"` functions with tensors: kernel-only workspaces.

A workspace whose kernels/ sources use no torch headers is built into a plain shared library
(`cuda_gym.judge.plain_build`); its `kernels_ext` module is a few generated lines that bind each
`extern "C"` function declared in the sources to an `Entry`. Calling an Entry checks every
argument against the C declaration (a tensor for each pointer, of the matching dtype and on the
build's device; a Python number for each scalar) and calls the function through ctypes, which
costs microseconds and no torch headers at build time.

A parameter of type `cudaStream_t` takes torch's current CUDA stream when the caller passes
None or leaves it out at the end of the argument list.
"""

from __future__ import annotations

import ctypes
import json
import os
from dataclasses import dataclass

# C scalar types -> ctypes type and the Python types accepted for them.
_INT_TYPES = {
    "int": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "unsigned": ctypes.c_uint,
    "unsigned int": ctypes.c_uint,
    "uint32_t": ctypes.c_uint32,
    "long": ctypes.c_long,
    "long long": ctypes.c_longlong,
    "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "short": ctypes.c_short,
    "int16_t": ctypes.c_int16,
    "int8_t": ctypes.c_int8,
    "char": ctypes.c_char,
    "bool": ctypes.c_bool,
}
_FLOAT_TYPES = {"float": ctypes.c_float, "double": ctypes.c_double}
STREAM_TYPES = ("cudaStream_t",)

# Pointer base types -> the torch dtype names a tensor passed for them may have.
POINTER_DTYPES = {
    "float": ("float32",),
    "double": ("float64",),
    "__half": ("float16",),
    "half": ("float16",),
    "__nv_bfloat16": ("bfloat16",),
    "nv_bfloat16": ("bfloat16",),
    "int": ("int32",),
    "int32_t": ("int32",),
    "unsigned": ("int32",),
    "unsigned int": ("int32",),
    "uint32_t": ("int32",),
    "long": ("int64",),
    "long long": ("int64",),
    "int64_t": ("int64",),
    "uint64_t": ("int64",),
    "short": ("int16",),
    "int16_t": ("int16",),
    "int8_t": ("int8",),
    "char": ("int8", "uint8", "bool"),
    "signed char": ("int8",),
    "unsigned char": ("uint8", "bool"),
    "uint8_t": ("uint8", "bool"),
    "bool": ("bool",),
    "void": None,  # any dtype
}
RETURN_TYPES = {"void": None, **_INT_TYPES, **_FLOAT_TYPES}


def scalar_kinds() -> set[str]:
    """The C scalar parameter types an entry point may declare."""
    return set(_INT_TYPES) | set(_FLOAT_TYPES) | set(STREAM_TYPES)


@dataclass(frozen=True)
class Param:
    """One C parameter: its base type, whether it is a pointer, and its name."""

    ctype: str
    pointer: bool
    name: str

    def describe(self) -> str:
        """The parameter as C declares it, e.g. `float* out`."""
        return f"{self.ctype}{'*' if self.pointer else ''} {self.name}".strip()


class ArgumentError(TypeError):
    """A call to an entry point whose arguments do not match its C declaration."""


class Entry:
    """One `extern "C"` function of the workspace's library, callable with tensors and numbers."""

    def __init__(self, function, name: str, params: list[Param], returns: str, device: str):
        self._function = function
        self.__name__ = name
        self.params = params
        self.device = device
        function.restype = RETURN_TYPES[returns]
        function.argtypes = [ctypes.c_void_p if p.pointer else _ctype(p) for p in params]
        self.__doc__ = f"{returns} {name}({', '.join(p.describe() for p in params)})"

    def __repr__(self) -> str:
        return f"<kernels_ext entry point {self.__doc__}>"

    def __call__(self, *args):
        """Check the arguments against the C declaration and call the function."""
        params = self.params
        if len(args) < len(params) and all(
            p.ctype in STREAM_TYPES and not p.pointer for p in params[len(args) :]
        ):
            args = args + (None,) * (len(params) - len(args))
        if len(args) != len(params):
            raise ArgumentError(
                f"{self.__name__}() takes {len(params)} argument(s) ({self.__doc__}), "
                f"got {len(args)}"
            )
        converted = [self._convert(p, a, i) for i, (p, a) in enumerate(zip(params, args))]
        return self._function(*converted)

    def _convert(self, param: Param, value, index: int):
        import torch

        where = f"{self.__name__}() argument {index + 1} ({param.describe()})"
        if param.pointer:
            if not isinstance(value, torch.Tensor):
                raise ArgumentError(f"{where}: expected a tensor, got {type(value).__name__}")
            allowed = POINTER_DTYPES.get(param.ctype)
            dtype = str(value.dtype).removeprefix("torch.")
            if allowed is not None and dtype not in allowed:
                wanted = "/".join(allowed)
                raise ArgumentError(f"{where}: expected a tensor of {wanted}, got {dtype}")
            if value.device.type != self.device:
                raise ArgumentError(
                    f"{where}: the tensor is on {value.device}, the library is built for "
                    f"{self.device}"
                )
            return value.data_ptr() or None
        if param.ctype in STREAM_TYPES:
            if value is None:
                return torch.cuda.current_stream().cuda_stream or None
            if isinstance(value, torch.cuda.Stream):
                return value.cuda_stream or None
            if isinstance(value, int):
                return value or None
            raise ArgumentError(f"{where}: expected a torch.cuda.Stream or None")
        if isinstance(value, torch.Tensor):
            raise ArgumentError(f"{where}: expected a Python number; use .item() for a tensor")
        if param.ctype in _FLOAT_TYPES:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ArgumentError(f"{where}: expected a float, got {type(value).__name__}")
            return float(value)
        if not isinstance(value, int):
            raise ArgumentError(f"{where}: expected an int, got {type(value).__name__}")
        if param.ctype == "char":
            return bytes([value & 0xFF])
        return value


def _ctype(param: Param):
    if param.ctype in STREAM_TYPES:
        return ctypes.c_void_p
    return _INT_TYPES.get(param.ctype) or _FLOAT_TYPES[param.ctype]


def bind(namespace: dict, module_file: str) -> None:
    """Fill a generated `kernels_ext` module's namespace with its library's entry points.

    The library (`libkernels.so`) and the declarations (`entry_points.json`) sit beside
    `module_file`.
    """
    here = os.path.dirname(os.path.abspath(module_file))
    with open(os.path.join(here, "entry_points.json")) as f:
        spec = json.load(f)
    library = ctypes.CDLL(os.path.join(here, spec["library"]), mode=ctypes.RTLD_LOCAL)
    for entry in spec["entry_points"]:
        params = [Param(**p) for p in entry["params"]]
        namespace[entry["name"]] = Entry(
            getattr(library, entry["name"]), entry["name"], params, entry["returns"], spec["device"]
        )
    namespace["__all__"] = [e["name"] for e in spec["entry_points"]]
