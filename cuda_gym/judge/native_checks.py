"""Checks of the candidate's native code: its sources before the build, its binaries after.

Sources (C/C++/CUDA files of kernels/ and load_inline strings): `preprocess` joins
backslash-newlines and drops comments before any scan, so a forbidden token cannot be split or
hidden; `include_violations` allows `#include` of the workspace's own files and of the
toolchain's headers only (no absolute paths, no `..`).

Binaries (trusted side, after the extension is loaded): `symbol_violations` lists a shared
object's undefined symbols (`nm -D --undefined-only`, demangled) and refuses the ones that do
compute below PyTorch's dispatcher (where the fallback ban cannot see it): ATen's per-backend
and native kernels (`at::cpu::`, `at::native::`, ...), the dispatcher's own handles (typed
operator handles redispatch with any key set), redispatch, the dispatch TLS (popping the
dispatch-mode stack, excluding dispatch keys, the raw key-set variable), switching RecordFunction
off or asking whether it is observed (a profiler's callbacks, CUPTI, Kineto), BLAS/LAPACK
routines in any spelling, and every C function libtorch_cpu exports (MKL under all its names,
AOTInductor's shims that call ATen's kernels, NNPACK, ...) but a few harmless
families (`TORCH_C_EXPORTS_ALLOWED`: Sleef's vector math, which ATen's inline vector code calls,
logging flags, the stable ABI's tensor accessors).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

from cuda_gym.judge.verdict import ViolationKind, format_violation
from cuda_gym.runtime.perf_sampling import process_tree

# Demangled undefined symbols that compute below the dispatcher or switch its modes off.
_BELOW_DISPATCHER = re.compile(
    r"\bat::(?:cpu|native|compositeexplicitautograd|compositeexplicitautogradnonfunctional"
    r"|compositeimplicitautograd|meta)::"
    # at::cuda's per-backend ops (at::cuda::add); its stream/device helpers stay allowed.
    r"|\bat::cuda::(?!getCurrentCUDAStream|getDefaultCUDAStream|getStreamFromPool|CUDAStream"
    r"|getCurrentDeviceProperties|getDeviceProperties|detail::|getCurrentCUDABlasHandle"
    r"|warp_size|stream_synchronize|set_device|current_device|device_count|memcpy_and_sync"
    r"|CUDACachingAllocator::|getCurrentCUDASparseHandle)[a-z_0-9]+\("
    r"|\bat::_ops::\w+::redispatch\b"
    r"|TorchDispatchModeTLS|PythonDispatcher|\bc10::impl::tls_|_force_tls_local"
    # (Not ExcludeDispatchKeyGuard: torch's own headers inline it into every extension; the
    # source scan refuses it in the candidate's code.)
    r"|_tls_set_dispatch_key|tls_local_dispatch_key_set|raw_local_dispatch_key_set"
    # The dispatcher itself: an operator found by name, called through a handle (its inline
    # `redispatch` takes any key set and skips RecordFunction).
    r"|\bc10::(?:Dispatcher|OperatorHandle|impl::OperatorEntry)::"
    # RecordFunction (what a profiler of ATen's calls observes) switched off.
    r"|\bat::(?:enableRecordFunction|clearCallbacks|clearThreadLocalCallbacks|clearGlobalCallbacks"
    r"|removeCallback|disableCallback|reenableCallback|set_record_function_tls_"
    r"|get_record_function_tls_)\b"
    # ... or a callback of the solution's own added, which runs inside the runner's ops
    # (red-team round 32: it re-strided the output inside the runner's copy into its slot).
    r"|\bat::(?:addGlobalCallback|addThreadLocalCallback)\b"
    # A tensor's metadata rewritten below the dispatcher (sizes, strides, storage, the lazy
    # conjugate and negative bits: an op no ban sees).
    r"|\bc10::TensorImpl::(?:set_sizes_and_strides|set_sizes_contiguous|set_storage_offset"
    r"|set_storage_keep_dtype|set_storage_and_dtype|_set_neg|_set_conj|shallow_copy_from"
    r"|empty_tensor_restride)\b"
)
# Whether ATen's calls are observed (a profiler's RecordFunction callbacks, CUPTI, Kineto): on a
# GPU the driver's profile of the solution's kernels is taken in its process, and a solution
# that could tell a profiled call from the others could run its own kernels only then.
_PROFILER_STATE = re.compile(
    r"\bat::(?:hasCallbacks|hasGlobalCallbacks|hasThreadLocalCallbacks|isRecordFunctionEnabled"
    r"|getStepCallbacks|getStepCallbacksUnlessEmpty|RecordFunction::isActive)\b"
    r"|\btorch::(?:autograd::)?profiler::|\blibkineto::|^cupti[A-Z]\w*(?:@.*)?$"
)
# Functions found by name at run time (libtorch's at::cpu:: kernels through dlsym, say, or
# cuBLAS's GEMM in the symbol table dl_iterate_phdr leads to): an extension of the candidate's
# has no use for them.
_RUNTIME_LOOKUP = re.compile(
    r"^(?:dlsym|dlvsym|dlopen|dlmopen|__libc_dl\w*|dl_iterate_phdr|dladdr1?|dlinfo)(?:@.*)?$"
)
# Python code run from C++: a module imported or source text compiled and run by name (whatever
# the solution's Python may not import, say gc to reach the runner's objects, or torch.compile).
_PYTHON_BY_NAME = re.compile(
    r"^(?:PyImport_\w+|PyRun_\w+|Py_CompileString\w*|PyEval_EvalCode\w*|Py_CompileStringObject)"
    r"(?:@.*)?$"
)
# Python's own bulk copies of buffers: a strided Py_buffer filled from memory in Fortran order
# is a transpose done by libpython (red-team round 16), a memoryview's the same from Python.
_PYTHON_BUFFER_COPY = re.compile(
    r"^(?:PyBuffer_FromContiguous|PyBuffer_ToContiguous|PyObject_CopyData|PyBuffer_GetPointer"
    r"|PyMemoryView_FromBuffer|PyMemoryView_FromMemory|PyMemoryView_GetContiguous)(?:@.*)?$"
)
# libtorch_python's conversions of a tensor's data to and from NumPy (and its legacy
# constructor from Python data), called from C++ past the runner's Python stand-ins (red-team
# round 23: `tensor_to_numpy` views of the input and output, libpython's copies transposing).
_PYTHON_DATA = re.compile(
    r"\btorch::utils::(?:tensor_to_numpy|tensor_from_numpy|legacy_tensor_ctor|tensor_\w+"
    r"|\w*numpy\w*)\b"
)
# In any case (MKL exports SGEMM, SGEMM_64, sgemm_64_, ...).
# Also under a vendor's prefix: NumPy's bundled OpenBLAS exports scipy_cblas_sgemm64_.
_BLAS = re.compile(
    r"^(?:[A-Za-z0-9]+_)?(?:cblas_\w+|mkl_\w+|openblas_\w+|LAPACKE_\w+|dnnl_\w+"
    r"|[sdcz](?:gemm|gemv|symm|syrk|trsm|trmm|axpy|dot[cu]?|scal|ger|gesv|getrf|getrs|potrf"
    r"|geqrf|gesdd|syevd?|copy)(?:_batch|_?64)*_?(?:_64)?_?)(?:@.*)?$",
    re.IGNORECASE,
)
# NVIDIA's compute libraries' host API (cuBLAS and cuBLASLt, cuDNN, cuFFT, cuSPARSE, cuSOLVER),
# refused unless the task allows vendor libraries: their kernels are not the solution's (a
# cuBLAS GEMM called from the solution's own extension is still cuBLAS's). The profile's kernel
# names are the other line, but that table is made inside the candidate's process.
_VENDOR_API = re.compile(
    r"^(?:cublas|cublasLt|cudnn|cufft|cusparse|cusolver(?:Dn|Sp|Rf|Mg)?)[A-Z_]\w*(?:@.*)?$"
)
# The CPU libraries linked into libtorch_cpu, called by their C++ names (fbgemm's transpose,
# oneDNN's reorders, XNNPACK, QNNPACK): compute below the dispatcher, never a solution's own.
# (A red team's transpose task done by fbgemm::transpose_simd, whose name the CPU sampler
# took for an allowed op's.)
_CPU_VENDOR_CODE = re.compile(r"\b(?:fbgemm|dnnl|ideep|xnnpack|pytorch_qnnp|qnnpack)::")
# C functions libtorch_cpu exports that an extension may call: Sleef (ATen's inline vector
# math), logging flags, cpuinfo, profiling (ITT) hooks, and the stable ABI's accessors.
TORCH_C_EXPORTS_ALLOWED = re.compile(
    r"^(?:Sleef_|FLAGS_|cpuinfo_|__itt|__intel_|_edata$|_end$|__bss_start$"
    r"|aoti_torch_(?:get_|dtype_|device_type_|layout_|delete_tensor_object$|empty_strided$"
    r"|create_tensor_from_blob|new_tensor_handle$|item_|scalar_to_tensor_|is_|memory_format_"
    r"|grad_mode_))"
)
# Never libtorch's: the C and CUDA runtimes, Python, OpenMP (a safety net should a build of
# torch export one of them).
_RUNTIME_NAMES = re.compile(r"^(?:_?_?cuda|cu[A-Z]|_?_?nv|_?Py|omp_|GOMP_|__kmpc_|__cxa_|_Unwind_)")
TORCH_C_LIBRARIES = ("libtorch_cpu.so",)
# Shared objects under these directories are the system's, the venv's or torch's, not the
# candidate's.
_SYSTEM_ROOTS = ("/usr/", "/lib/", "/lib64/", "/opt/", "/etc/", "/snap/")


def preprocess(text: str) -> str:
    """C/C++ text with backslash-newlines joined and comments removed (strings kept).

    Line numbers are kept: a removed comment leaves its newlines, and a joined line is padded
    with the newlines it swallowed after it.
    """
    text = text.replace("\r\n", "\n")
    out = []
    i, n = 0, len(text)
    pending = 0  # newlines swallowed by line joins, emitted at the next real newline
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            pending += 1
            i += 2
            continue
        if c == "\n":
            out.append("\n" * (1 + pending))
            pending = 0
            i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] in "/*":
            if text[i + 1] == "/":
                while i < n and text[i] != "\n":
                    if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                        pending += 1
                        i += 1
                    i += 1
            else:
                end = text.find("*/", i + 2)
                end = n if end < 0 else end + 2
                out.append(" " + "\n" * text.count("\n", i, end))
                i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


# `#include`, `#include_next` and GCC's `#import`, with `#` or its digraph `%:`.
_INCLUDE = re.compile(
    r'^\s*(?:#|%:)\s*(include_next|include|import)\b\s*([<"])([^>"]*)[>"]', re.MULTILINE
)
# `#include MACRO`: a header name made by the preprocessor, which no scan can check.
_COMPUTED_INCLUDE = re.compile(
    r"^\s*(?:#|%:)\s*(?:include_next|include|import)\b\s*[A-Za-z_]", re.MULTILINE
)


def include_violations(
    text: str, where: str | None = None, files: Collection[str] = ()
) -> list[tuple[int, str]]:
    """(line, message) for each `#include` that could reach a file outside the workspace.

    `text` is preprocessed. Quoted includes must be relative paths inside the workspace; an
    angle include names a header of the toolchain, torch or CUDA (searched only in their
    directories), so it too may not be absolute or climb with `..`. A quoted include in the
    file `where` (its path in the solution folder, "kernels/ops/k.cu") may climb to another of
    `files` (the folder's sources, named alike) in the same top folder: `"../common.cuh"` from
    kernels/ops/ to kernels/common.cuh, which the compiler finds beside the file.
    """
    found = []
    for match in _COMPUTED_INCLUDE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        found.append((line, "a computed `#include MACRO` is not allowed: name the header."))
    for match in _INCLUDE.finditer(text):
        directive, quote, path = match.group(1), match.group(2), match.group(3).strip()
        line = text.count("\n", 0, match.start()) + 1
        parts = Path(path).parts
        # (#include_next looks past the including file's folder: only in the search path.)
        if directive == "include" and quote == '"' and _sibling(path, where, files):
            continue
        if path.startswith(("/", "~")) or ".." in parts or "\\" in path:
            found.append(
                (
                    line,
                    f"`#{directive} {quote}{path}` names a file outside the workspace: "
                    "include your own files by relative path, and toolchain/torch/CUDA headers.",
                )
            )
    return found


def _sibling(path: str, where: str | None, files: Collection[str]) -> bool:
    """Whether `path`, included from the file `where`, is another of `files` in its top folder.

    Only leading `..` (`../../common.cuh`), never climbing out of the top folder: the compiler
    resolves the path on disk from the including file's folder, so a lexical walk matches it
    only where no `..` follows a folder name.
    """
    if where is None or "\\" in path or path.startswith(("/", "~")):
        return False
    parts = [p for p in path.split("/") if p not in ("", ".")]
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    rest = parts[ups:]
    folder = where.split("/")[:-1]
    if not rest or ".." in rest or ups >= len(folder):
        return False
    return "/".join(folder[: len(folder) - ups] + rest) in files


def undefined_symbols(shared_object: Path) -> list[str]:
    """The demangled undefined dynamic symbols of a shared object (`nm -DC --undefined-only`)."""
    nm = shutil.which("nm")
    if nm is None:
        raise FileNotFoundError("nm (binutils) is needed to check the candidate's binaries")
    proc = subprocess.run(
        [nm, "-DC", "--undefined-only", str(shared_object)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise ValueError(f"nm failed on {shared_object.name}: {proc.stderr.strip()[:300]}")
    symbols = []
    for line in proc.stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0] in ("U", "w", "v"):
            symbols.append(parts[1].strip())
    return symbols


@functools.lru_cache(maxsize=1)
def torch_c_exports() -> frozenset[str]:
    """The C (unmangled) functions and variables torch's compute library exports.

    Read from the dynamic symbol table of libtorch_cpu (`nm -D --defined-only`, a fraction of
    a second; the zygote reads it once for every worker it forks). Empty where torch or nm is
    missing: the other rules still apply.
    """
    nm = shutil.which("nm")
    spec = importlib.util.find_spec("torch")
    if nm is None or spec is None or not spec.origin:
        return frozenset()
    names = set()
    for library in TORCH_C_LIBRARIES:
        path = Path(spec.origin).parent / "lib" / library
        if not path.is_file():
            continue
        proc = subprocess.run(
            [nm, "-D", "--defined-only", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        for line in proc.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and not parts[2].startswith("_Z"):
                names.add(parts[2].split("@", 1)[0])
    return frozenset(names)


@functools.lru_cache(maxsize=1)
def operator_structs() -> dict[str, str]:
    """{`at::_ops` struct name: ATen operator}, e.g. "add_Tensor" -> "aten::add"."""
    import torch

    found = {}
    for schema in torch._C._jit_get_all_schemas():
        namespace, _, name = schema.name.partition("::")
        if namespace == "aten":
            struct = f"{name}_{schema.overload_name}" if schema.overload_name else name
            found[struct] = schema.name
    return found


_OPERATOR_CALL = re.compile(r"^at::_ops::(\w+)::call\(")
# TorchScript and the autograd engine run operators of their own from C++: their functions
# (not the vtable of AutogradMeta, which every extension that makes a tensor refers to).
_OWN_INTERPRETERS = re.compile(r"^torch::(?:jit|autograd)::")


def bad_symbol(
    symbol: str, allowed_ops: frozenset[str] | None = None, vendor_allowed: bool = True
) -> bool:
    """Whether a (demangled) undefined symbol of the candidate's computes below the dispatcher.

    `allowed_ops` ("aten::view", ...): the operators the candidate may call (the fallback ban's
    list). With it, a call of any other operator through the dispatcher (`at::_ops::<op>::call`,
    what `at::addmm` and `Tensor::add` compile to) is refused too: from a thread of the
    extension's own, or an OpenMP worker, the ban's per-thread dispatch mode never sees it.
    `vendor_allowed` False: NVIDIA's compute libraries (cuBLAS, cuDNN, ...) are refused too.
    """
    if not vendor_allowed and _VENDOR_API.match(symbol):
        return True
    if _CPU_VENDOR_CODE.search(symbol):
        return True
    if (
        _BELOW_DISPATCHER.search(symbol)
        or _BLAS.match(symbol)
        or _RUNTIME_LOOKUP.match(symbol)
        or _PYTHON_BY_NAME.match(symbol)
        or _PYTHON_BUFFER_COPY.match(symbol)
        or _PYTHON_DATA.search(symbol)
        or _OWN_INTERPRETERS.match(symbol)
        or _PROFILER_STATE.search(symbol)
    ):
        return True
    call = _OPERATOR_CALL.match(symbol) if allowed_ops is not None else None
    if call is not None:
        op = operator_structs().get(call.group(1))
        if op not in allowed_ops and op not in COMPOSITE_FORMS_ALLOWED:
            return True
    return _libtorch_c_export(symbol)


# Operators a C++ caller names that decompose, before the ban's mode sees them, into allowed
# ones (`x.to(kFloat)` is `_to_copy`, `t.item<float>()` `_local_scalar_dense`): allowed by name.
COMPOSITE_FORMS_ALLOWED = frozenset(
    {"aten::to", "aten::item", "aten::type_as", "aten::reshape_as", "aten::is_same_size"}
)


def _libtorch_c_export(symbol: str) -> bool:
    name = symbol.split("@", 1)[0]
    return (
        name in torch_c_exports()
        and not TORCH_C_EXPORTS_ALLOWED.match(name)
        and not _RUNTIME_NAMES.match(name)
    )


def symbol_violations(
    shared_object: Path, allowed_ops: frozenset[str] | None = None, vendor_allowed: bool = True
) -> list[str]:
    """Violations ("native_symbols: ...") for the below-dispatcher symbols `shared_object` uses.

    `allowed_ops` and `vendor_allowed` as for `bad_symbol`.
    """
    try:
        symbols = undefined_symbols(shared_object)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return [
            format_violation(
                ViolationKind.NATIVE_SYMBOLS,
                f"{shared_object.name} could not be inspected ({exc})",
            )
        ]
    bad = [s for s in symbols if bad_symbol(s, allowed_ops, vendor_allowed)]
    if not bad:
        return []
    shown = "; ".join(sorted(set(bad))[:4])
    return [
        format_violation(
            ViolationKind.NATIVE_SYMBOLS,
            f"{shared_object.name} calls PyTorch, BLAS or NVIDIA library compute below the "
            f"dispatcher, switches dispatch off or looks functions up by name ({shown}): "
            "compute with your own kernels",
        )
    ]


def candidate_objects(pid: int, trusted_roots: tuple[str, ...] = ()) -> list[Path]:
    """Shared objects mapped by process `pid` and its descendants, outside the system's.

    Anything outside the system's directories, this Python's prefixes (the venv, torch) and
    `trusted_roots` counts as the candidate's: an extension in the build cache, in
    load_inline's directory, in the scratch directory.
    """
    trusted = (
        tuple(
            str(Path(p).resolve()) + "/"
            for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, *trusted_roots}
        )
        + _SYSTEM_ROOTS
    )
    found: dict[str, Path] = {}
    for proc_pid in process_tree(pid):
        try:
            maps = Path(f"/proc/{proc_pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            fields = line.split(None, 5)
            if len(fields) < 6 or ".so" not in fields[5]:
                continue
            path = fields[5].strip().removesuffix(" (deleted)")
            if not path.startswith("/") or path.startswith(trusted):
                continue
            # The file as that process sees it: a sandboxed runner's private /tmp, for one, is
            # not in this process's mount namespace.
            seen = Path(f"/proc/{proc_pid}/root{path}")
            found.setdefault(path, seen if os.path.exists(seen) else Path(path))
    return list(found.values())
