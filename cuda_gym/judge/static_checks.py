"""Reject solution sources whose code (read with the AST, never run) tries to game the judge.

Two rule sets. "env" is the environment's (the agent reads it in the workspace skill): torch,
your kernels and a short list of harmless standard-library modules. "external" is for code
written elsewhere (`cuda-gym judge`, the KernelBench harness): the same rules with a longer
module list (os without process control, pathlib, tempfile, logging, json, ...), so honest code
is not rejected for its style. Either way the checks are a courtesy that explains the rules
early; the dispatcher ban and the runtime checks are the defence.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect
import re
import string
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass

RULES: dict[str, str] = {
    "syntax": "model_new.py must parse as Python.",
    "try_except": "No try/except (a fallback hides a failing kernel) and no __exit__ methods.",
    "forbidden_import": "Import only torch (not torch._dynamo, _inductor, jit, fx, library, "
    "multiprocessing, distributed, export or compiler), your kernels (kernels_ext, cupy, triton) "
    "and the rule set's standard-library modules (ENV_MODULES or EXTERNAL_MODULES); no relative "
    "or * imports.",
    "reference_access": "No `model`, `reference_task` or `reference` imports and no name `Model`.",
    "dynamic_code": "No exec, eval, compile, __import__, globals, locals, vars, breakpoint, open, "
    "input, three-argument type(), or getattr/setattr/delattr with a computed name or a module.",
    "introspection": "No dunder or frame attributes that reach interpreter state (__class__, "
    "__globals__, __dict__, __builtins__, f_back, _getframe, ...).",
    "monkey_patch": "No assignment or del on attributes or items of imported modules.",
    "precision_flags": "No changes to global numerics or determinism (torch.backends flags and "
    "setters, set_float32_matmul_precision, set_default_dtype, use_deterministic_algorithms, ...).",
    "torch_compile": "No torch.compile, Module.compile, torch.jit, torch._dynamo, torch._inductor, "
    "torch.fx, torch.export or torch.compiler.",
    "host_compute": "No Tensor.map_, map2_ or apply_ (PyTorch runs a Python function on every "
    "element: the interpreter computes, not a kernel), no NumPy array protocol of your own "
    "(__array_interface__, __array_struct__, __array__, __dlpack__: NumPy over a tensor's "
    "memory) and no memoryview (Python gathering raw memory).",
    "tensor_subclass": "No tensor subclasses or torch modes, __torch_function__, "
    "__torch_dispatch__, as_subclass or _make_subclass.",
    "side_stream": "No streams, events or CUDA graphs unless the task allows streams.",
    "op_registration": "No torch.library, torch.ops.load_library, or cpp_extension builds with "
    "is_python_module=False or **kwargs.",
    "global_state": "No state across calls: no global/nonlocal, no mutation of module-level "
    "objects in functions, no stores on self in forward, no data_ptr() (but its alignment, "
    "`x.data_ptr() % 16`), no argument caches, no mutable default arguments.",
    "private_api": "No private torch APIs (any `torch...._name` path, e.g. torch._C or "
    "torch.utils._python_dispatch): they reach the harness's dispatcher and internals.",
    "process_control": "No process, signal, exit or file-descriptor control through os (system, "
    "popen, exec*, spawn*, fork, kill, _exit, dup2, ...); os.environ, os.path and directory "
    "helpers are fine where the rule set allows os.",
    "dispatcher_bypass": "C++/CUDA sources must not touch dispatch keys or guards "
    "(ExcludeDispatchKeyGuard, DispatchKeySet, AutoDispatchBelow..., DisableTorchDispatch, "
    "c10::impl TLS, the dispatch-mode stack), call ATen below the dispatcher (at::cpu::, "
    "at::native::), look functions up by name at run time (dlsym, dlopen), nor export memory "
    "to Python's buffer protocol, NumPy or DLPack (py::buffer_protocol, py::array, "
    "DLManagedTensor).",
    "python_from_native": "C++/CUDA sources may not reach Python's objects: no CPython API "
    "(PyObject, PyEval_GetBuiltins, PyObject_GetAttr, Py_TYPE, type slots; PyErr_ and PyExc_ "
    "are fine) and pybind11 only to bind functions (PYBIND11_MODULE, m.def, m.doc(), py::arg, "
    "py::gil_scoped_release: no py::object, .attr(...), py::globals(), pybind11/functional.h). "
    "Take tensors and numbers as arguments and return tensors.",
    "kernel_copies": "C++/CUDA sources may not have the operating system move data (readv, "
    "writev, splice, vmsplice, tee, sendfile, copy_file_range, process_vm_*, raw syscall()): "
    "the kernel's copies would do the work of no kernel of yours.",
    "native_include": "C++/CUDA sources may #include workspace files by relative path and "
    "toolchain, torch and CUDA headers only (no absolute paths, no '..').",
    "token_pasting": "C++/CUDA sources may not paste identifiers together (`##`, "
    "C10_CONCATENATE, AT_CONCAT, PYBIND11_CONCAT, ...): write every name out in full "
    "(`, ##__VA_ARGS__` is fine).",
}

# Tokens in C++/CUDA sources that switch off dispatcher modes (and with them the fallback ban).
NATIVE_FORBIDDEN_TOKENS = (
    "DispatchKey",
    "ExcludeDispatchKeyGuard",
    "IncludeDispatchKeyGuard",
    "AutoDispatchBelow",
    "AutoNonVariableTypeMode",
    "c10::impl::tls",
    "tls_local_dispatch_key_set",
    "_force_tls_local",
    "PythonDispatcher",
    "TORCH_LIBRARY",
    # Header-defined guards that switch the Python dispatch key (and the ban) off, their headers,
    # and the Python mode objects reached from C++: torch::DisableTorchDispatch,
    # StashTorchDispatchModeGuard, ThreadLocalStateGuard, RestorePythonTLSSnapshot, ...
    "TorchDispatch",
    "torch_dispatch",
    "DisableTorchFunction",
    "disable_torch_function",
    "ThreadLocalState",
    "PythonTLS",
    "SetTLSOnEntry",
    "python_raii",
    "dispatch_stack",
    "cell_contents",
    "__closure__",
    # A type's bases and method tables from C++: torch.Tensor's C base keeps the methods the
    # runner's stand-ins replace on torch.Tensor (red-team round 24: TensorBase.tolist of a
    # transposed view through Py_TYPE(x)->tp_base did a transpose task, reward 1).
    "tp_base",
    "tp_mro",
    "tp_dict",
    "tp_methods",
    "tp_getset",
    "__bases__",
    "__base__",
    "__mro__",
    # Functions of other libraries (libtorch's below the dispatcher) found by name at run time.
    "dlsym",
    "dlvsym",
    "dlopen",
    "dlmopen",
    "__libc_dl",
    # ... or found in the loaded libraries' own symbol tables (the list of them and their
    # addresses), e.g. cuBLAS's GEMM in its dynamic symbol table.
    "dl_iterate_phdr",
    "dladdr",
    "dlinfo",
    # ... or in their ELF images in memory, walked from a function's address (red-team round
    # 31 found at::_ops::copy_::redispatch from &at::_ops::empty_memory_format::call's page,
    # and libpython's frame API from &PyErr_Occurred's).
    "Elf64_",
    "Elf32_",
    "ElfW",
    "ELFMAG",
    "\x7fELF",
    "DT_SYMTAB",
    "DT_STRTAB",
    "DT_GNU_HASH",
    "PT_DYNAMIC",
    "_r_debug",
    "link_map",
    "getauxval",
    "at::_ops",
    "at::cpu::",
    "at::native::",
    "at::compositeexplicitautograd",
    "at::compositeimplicitautograd",
    "redispatch",
    # The dispatcher's operator handles (an op found by name, called with any key set) and the
    # raw dispatch-key TLS; RecordFunction (what observes ATen's calls) switched off.
    "c10::Dispatcher",
    "Dispatcher::singleton",
    "OperatorHandle",
    "raw_local_dispatch_key_set",
    "LocalDispatchKeySet",
    "enableRecordFunction",
    "RecordFunctionGuard",
    "clearCallbacks",
    # ... or a callback of the solution's added to it, which runs inside the runner's own ops
    # (red-team round 32: at its copy into the driver's slot it re-strided the output over the
    # input, and PyTorch's copy kernel did the transpose).
    "addGlobalCallback",
    "addThreadLocalCallback",
    "RecordFunctionCallback",
    "CallbackHandle",
    # A tensor's metadata rewritten below the dispatcher (no op: no ban sees it): sizes,
    # strides, storage, the lazy conjugate and negative bits (round 32's re-striding, and a
    # negative bit that made the runner hand the output over through PyTorch's copy).
    "TensorImpl",
    "set_sizes_and_strides",
    "set_sizes_contiguous",
    "set_storage_offset",
    "set_storage_keep_dtype",
    "set_storage_and_dtype",
    "_set_neg",
    "_set_conj",
    "shallow_copy_from",
    "empty_tensor_restride",
    # ... or asked whether it is observed: a profiled call told from the others.
    "hasCallbacks",
    "StepCallbacks",
    "isRecordFunctionEnabled",
    "profilerEnabled",
    "profiler::",
    "cupti",
    "libkineto",
    # ... and the interpreter's profile and trace hooks (the runner counts own calls under one).
    "c_profilefunc",
    "c_tracefunc",
    "c_profileobj",
    "c_traceobj",
    "PyEval_SetProfile",
    "PyEval_SetTrace",
    "aoti_torch_",
    # Python run from C++ by name (modules imported, source evaluated), and the assembler's
    # file inclusion (`.incbin "/any/file"` copies a file the compiler can read into the binary).
    "::import(",
    "pybind11/eval.h",
    "py::exec",
    "py::eval",
    "pybind11::exec",
    "pybind11::eval",
    "PyImport_",
    "PyRun_",
    "Py_CompileString",
    "PyEval_EvalCode",
    "__import__",
    "__builtins__",
    "__globals__",
    # ... or the globals and frames that lead to exec and __import__ (red-team round 26 ran
    # Python source hidden in a C string with `handle(PyEval_GetBuiltins())["exec"]`). The
    # builtins themselves stay reachable (pybind11's own `py::globals()`, the exploit suite's
    # kernels, which test the layers behind this scan): the runner refuses what the solution
    # compiles or execs (runner._Origin), from C++ too.
    "PyEval_GetGlobals",
    "PyEval_GetLocals",
    "PyEval_GetFrame",
    "PyFrame_",
    "PyFunction_Get",
    "PyModule_GetDict",
    "PyThreadState_Get",
    "PyInterpreterState_",
    "PySys_",
    "incbin",
    ".include",
    # Memory exported to Python's buffer protocol (or NumPy's) with strides of the solution's
    # choosing: `memoryview(obj).tobytes()` then gathers it in C order, a transpose done by
    # libpython (red-team round 20, reward 2 on transpose_pad).
    "buffer_protocol",
    "def_buffer",
    "Py_buffer",
    "bufferinfo",  # (Py_buffer's struct)
    "bf_getbuffer",
    "tp_as_buffer",
    "PyBufferProcs",
    "pybind11/numpy.h",
    "py::array",
    "pybind11::array",
    "PyArray_",
    "numpy/arrayobject.h",
    # ... or libtorch_python's own NumPy view of a tensor, called from C++ past the runner's
    # stand-in for Tensor.numpy (red-team round 23: NumPy's buffer and libpython's copies did
    # a transpose, reward 2).
    "tensor_to_numpy",
    "tensor_from_numpy",
    "tensor_numpy.h",
    # ... or raw bytes of a tensor's handed to Python, whose slicing gathers them (round 23:
    # a memoryview's strided tobytes() of an own copy of the input did transpose_pad).
    "py::bytes",
    "pybind11::bytes",
    "py::bytearray",
    "pybind11::bytearray",
    "py::memoryview",
    "pybind11::memoryview",
    "PyBytes_From",
    "PyByteArray_From",
    # ... or a DLPack capsule made by hand for NumPy's from_dlpack (round 21).
    "dlpack",
    "DLManagedTensor",
    "DLTensor",
    "dltensor",
    "PyCapsule_New",
)

# Names that honest code also uses inside its own words (an `enum class DispatchMode`, a
# `findOptimalChunk`): matched as whole identifiers, or as part of torch's compound names.
_NATIVE_FORBIDDEN_WORDS = re.compile(
    r"\b(?:findOp|findSchema|findSchemaOrThrow)\b|\w*(?:\wDispatchMode|DispatchMode\w)\w*"
    r"|::\s*import\s*\("  # (pybind11's module import, spaced: `module_::import ("numpy")`)
    # A library function's address (where an image walk starts), and the ELF headers.
    # (not a bitwise and with a constant: `(flags) & at::kX`)
    r"|(?:^|[=(),;:{}?\[]|\breturn)\s*&\s*(?:(?:::\s*)?(?:at|torch|c10|caffe2)\s*::(?!\s*k[A-Z])"
    r"|_?Py[A-Z]\w*)"
    r"|#\s*include\s*<(?:elf|link|sys/auxv)\.h>"
)

# Python's objects reached from C++ (red-team round 29: the builtins' __import__ of an already
# imported gc, which raises no audit event, found the runner's objects by gc.get_objects and
# switched their ban off; round 30 reached the runner's classes through pybind11's accessors and
# `__subclasses__`). An extension takes tensors and numbers as arguments and returns tensors:
# pybind11 serves only to bind its functions, and no public KernelBench solution uses any more
# of it, or of CPython's API (2615 files). Raising an error (PyErr_*, PyExc_*) is fine.
_PYTHON_API = re.compile(
    r"\b_?Py(?!Err_|Exc_)[A-Z][A-Za-z0-9]*_\w+"  # the C API: PyObject_GetAttr, _PyObject_...
    r"|Py(?:Object|TypeObject|VarObject|Interpreter|ThreadState|Frame|CodeObject|ModuleDef"
    r"|MethodDef|MemberDef|GetSetDef|CFunction|Capsule)"  # its types (toPyObject, PyObjectSlot)
    r"|\bPy_TYPE\b|\bob_(?:type|refcnt|base)\b|\b_PyRuntime\b|\b_(?:object|typeobject)\b"
    r"|\btp_(?:getattr|setattr|call|dict|subclasses|descr_|init|new|iter|members|base|weaklist)\w*"
    r"|\bTHP\w*|(?<![A-Za-z])pyobj|\btorch::(?:python|jit)\b"  # libtorch_python's
    r"|\b(?:get|set|has|del)attr\s*\(|\bglobals\s*\(|\bget_internals\b|\bget_\w*type_info\b"
)
# The pybind11 names binding code needs; any other (py::object, py::detail::..., py::type) holds
# or reaches Python objects.
PYBIND11_ALLOWED = frozenset(
    "module_ module arg arg_v kw_only pos_only gil_scoped_release gil_scoped_acquire call_guard "
    "return_value_policy".split()
)
_PYBIND11_NAME = re.compile(r"\b(?:py|pybind11)\s*::\s*(\w+)")
# An object's own methods reached whatever its type's name (a module's, an accessor's).
_OBJECT_METHODS = re.compile(
    r"(?:\.|->)\s*(?:attr|ptr|cast|inc_ref|dec_ref|get_type|def_submodule|add_object|reload)"
    r"\s*[(<]"
)
# pybind11 renamed or macro-wrapped, and its headers beyond plain binding (functional.h turns
# Python callables into std::function, embed.h and eval.h run Python).
_PYBIND11_DISGUISED = re.compile(
    r"\bnamespace\s+(?!py\b)\w+\s*=\s*(?:::\s*)?(?:pybind11|py)\b"
    r"|\busing\s+namespace\s+(?:::\s*)?(?:pybind11|py)\b"
    r"|\busing\s+(?:::\s*)?(?:pybind11|py)\s*::"
    r"|#\s*define\b[^\n]*\b(?:py|pybind11|attr|PYBIND11_MODULE)\b"
    r"|#\s*include\s*[<\"]pybind11/(?!pybind11\.h|stl\.h|complex\.h)"
    r"|\bPYBIND11_(?!MODULE\b)\w+"
)
# The module object of PYBIND11_MODULE or of a registration function (`py::module_& m`): only
# `m.def(...)`, `m.doc()` and handing it to a registration function may be done with it (its
# submodules and attributes are Python's; `decltype(m)` would make any module an argument).
_MODULE_VARIABLE = re.compile(
    r"PYBIND11_MODULE\s*\(\s*\w+\s*,\s*(\w+)\s*\)\s*\{"
    r"|\b(?:py|pybind11)\s*::\s*module_?\s*&?\s*(\w+)\s*(?:,[^(){};]*)?\)\s*\{"
)
_REGISTRATION = re.compile(r"\b(\w+)\s*\(\s*(?:py|pybind11)\s*::\s*module_?\s*&")


def _first_match(scanned: list[str], pattern: re.Pattern) -> tuple[int, str] | None:
    """(line number, matched text) of `pattern`'s first match in the scanned lines."""
    for lineno, line in enumerate(scanned, 1):
        match = pattern.search(line)
        if match:
            return lineno, match.group().strip()
    return None


def _python_reach(
    text: str, scanned: list[str], registrations: frozenset = frozenset()
) -> tuple[int, str] | None:
    """(line, what) of the first way a preprocessed C++ source reaches Python's objects.

    scanned: its lines with their literals decoded (check_native_sources); registrations:
    functions of the sources that take a module (`f(py::module_& m)`).
    """

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    api = _first_match(scanned, _PYTHON_API)
    if api:
        return api
    code = _STRING_LITERAL.sub('""', text)  # (names in strings are the API's to refuse)
    for match in _PYBIND11_NAME.finditer(code):
        if match.group(1) not in PYBIND11_ALLOWED:
            return line_of(match.start()), match.group()
    for pattern in (_OBJECT_METHODS, _PYBIND11_DISGUISED):
        match = pattern.search(code)
        if match:
            return line_of(match.start()), " ".join(match.group().split())
    for match in _MODULE_VARIABLE.finditer(code):
        name = match.group(1) or match.group(2)
        body_start = match.end()
        depth, end = 1, body_start
        while end < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[end], 0)
            end += 1
        body = code[body_start:end]
        for use in re.finditer(rf"\b{re.escape(name)}\b", body):
            after = body[use.end() : use.end() + 40]
            if re.match(r"\s*\.\s*(?:def\s*\(|doc\s*\(\s*\))", after):
                continue
            # an argument of a registration function (`register_ops(m, "prefix")`)
            call = re.search(r"(\w+)\s*\([^(){};]*$", body[max(0, use.start() - 120) : use.start()])
            if call and call.group(1) in registrations and re.match(r"\s*[,)]", after):
                continue
            return line_of(body_start + use.start()), f"{name} (other than {name}.def(...))"
    return None


# The operating system moving data for the solution (red-team round 29: writev/readv through a
# pipe with one iovec per element transposed a tensor; the kernel's copies are no own kernel).
_KERNEL_COPIES = re.compile(
    r"\b(?:p?readv2?|p?writev2?|vmsplice|splice|tee|sendfile(?:64)?|copy_file_range"
    r"|syscall)\s*\(|\bprocess_vm_\w+|\bSYS_\w+|\b__NR_\w+"
    # ... and round 33's: sendmsg/recvmsg scatter-gather over a socketpair, and system calls
    # made by the instruction itself in inline assembly (any call past any name).
    r"|\b(?:sendm?msg|recvm?msg|m?msghdr|msg_iov\w*|iovec|io_uring\w*|syscall|sysenter)\b"
    r"|\bint\s*\$?0x80\b|\bsvc\s+#?0\b"
)

# The assembler's file inclusion in any case (GNU as reads `.INCBIN` as `.incbin`).
_ASSEMBLER_FILES = re.compile(r'incbin|\.include\s*\\?"', re.IGNORECASE)

# Token pasting makes identifiers the scan above never sees (`Exclude##DispatchKeyGuard`), from
# parts that may even come from compiler flags built at run time: refused, but for GNU's
# `, ##__VA_ARGS__`, which pastes nothing. So are torch's own pasting macros of two free parts.
_PASTE = re.compile(r"##(?!\s*__VA_ARGS__)")
PASTING_MACROS = (
    "C10_CONCATENATE",
    "AT_CONCAT",
    "PYBIND11_CONCAT",
    "TH_CONCAT_",
    "ITT_JOIN",
    "DEFINE_PER_BACKEND_KEYS",
)
_STRING_LITERAL = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')

RULE_SETS = ("env", "external")
# Modules that cannot reach the harness, the reference or another process: pure computation
# on Python values, plus the candidate's own kernels.
ENV_MODULES = frozenset(
    "torch kernels_ext cupy triton __future__ math numbers typing typing_extensions functools "
    "dataclasses collections itertools operator enum re string abc hashlib warnings".split()
)
# Code written elsewhere also names build directories, reads environment variables and logs:
# harmless in the candidate's sandbox (read-only system, a private scratch directory).
# einops only calls tensor methods (seen by the fallback ban); KernelBench's Mamba2 references
# import it. numpy: constants and shapes in __init__ (np.sqrt(d), np.prod(shape)); inside
# forward the runner refuses every way of taking tensor data to it (runner._Ban).
EXTERNAL_MODULES = ENV_MODULES | frozenset(
    "os pathlib tempfile logging json textwrap glob einops numpy".split()
)
ALLOWED_MODULES = {"env": ENV_MODULES, "external": EXTERNAL_MODULES}
# os functions that start, signal or end processes, or touch file descriptors and identity.
OS_FORBIDDEN = frozenset(
    "system popen execl execle execlp execlpe execv execve execvp execvpe spawnl spawnle spawnlp "
    "spawnlpe spawnv spawnve spawnvp spawnvpe posix_spawn posix_spawnp fork forkpty kill killpg "
    "abort _exit wait waitpid wait3 wait4 waitid setsid setpgid setpgrp dup dup2 pipe pipe2 "
    "open close closerange write read fdopen openpty chdir fchdir chroot setuid setgid seteuid "
    "setegid setreuid setregid nice sched_setaffinity register_at_fork putenv unsetenv "
    "memfd_create eventfd pidfd_open sendfile splice".split()
)
FORBIDDEN_TORCH_MODULES = tuple(
    "torch._dynamo torch._inductor torch.jit torch.fx torch.library torch.multiprocessing "
    "torch.distributed torch.export torch.compiler".split()
)
REFERENCE_MODULES = frozenset({"model", "reference_task", "reference"})

_TRY_NODES = tuple(getattr(ast, name) for name in ("Try", "TryStar") if hasattr(ast, name))
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DYNAMIC_CALLS = frozenset(
    "exec eval compile __import__ globals locals vars breakpoint open input".split()
)
_ATTR_FUNCTIONS = frozenset({"getattr", "setattr", "delattr"})
# (`__annotations__` written by hand: a dataclass's field names pasted into the source that
# dataclasses runs, red-team round 27)
_INTROSPECTION_NAMES = frozenset({"__builtins__", "__loader__", "__spec__", "__annotations__"})
# getattr by another name: attribute paths in strings ("_C.x", "__func__.__closure__").
_ATTR_BY_STRING = frozenset({"operator.attrgetter", "operator.methodcaller"})
# eval by another name: string annotations evaluated (`a: "__import__('threading')"`).
_EVAL_BY_STRING = frozenset(
    {
        "typing.get_type_hints",
        "typing.ForwardRef",
        "typing._eval_type",
        "typing.evaluate_forward_ref",
        "typing_extensions.get_type_hints",
        "typing_extensions.ForwardRef",
        "typing_extensions.evaluate_forward_ref",
        "typing_extensions.get_annotations",
        "functools.singledispatch",
        "functools.singledispatchmethod",
        "dataclasses.make_dataclass",  # (fields named by strings, pasted into generated code)
    }
)
# Objects found by name at run time (`string.Formatter().get_field("0.__globals__[...]")`,
# logging.config's "ext://module.name" values) and code or libraries loaded from data (pickle in
# torch.load / numpy.load, ctypes through numpy.ctypeslib, Fortran builds through f2py).
_LOAD_BY_STRING = (
    "string.Formatter",
    "logging.config",
    "numpy.ctypeslib",
    "numpy.f2py",
    "numpy.load",
    "torch.load",
    "torch.serialization",
    "torch.package",
    "torch.hub",
    "torch.utils.benchmark",  # (Timer's stmt and setup strings are compiled: round 28)
)
_ATTRIBUTE_RULES: dict[str, str] = {
    **dict.fromkeys(
        "__class__ __subclasses__ __globals__ __code__ __dict__ __builtins__ __closure__ __mro__ "
        "__bases__ __base__ __getattribute__ __self__ __func__ __wrapped__ __traceback__ "
        "__setattr__ __delattr__ f_back f_globals f_locals f_code gi_frame cr_frame ag_frame "
        "tb_frame _getframe cell_contents".split(),
        "introspection",
    ),
    # The dispatch-mode stack's getters and setters, on whatever object they are reached
    # through (a module found at run time is no torch.* path).
    **dict.fromkeys(
        "_get_dispatch_stack_at _get_dispatch_mode _pop_torch_dispatch_stack "
        "_push_on_torch_dispatch_stack _disable_current_modes _get_current_dispatch_mode "
        "_get_current_dispatch_mode_stack _pop_mode _push_mode".split(),
        "introspection",
    ),
    **dict.fromkeys(
        "as_subclass _make_subclass _make_wrapper_subclass __torch_function__ "
        "__torch_dispatch__".split(),
        "tensor_subclass",
    ),
    # PyTorch's per-element Python loops over tensor data (red-team round 20: map_ did a
    # transpose, map2_ a gated product, with no op reaching the ban); a class's method order
    # reaches torch.Tensor's C base, past the runner's stand-ins (`mro()[1].tolist`).
    **dict.fromkeys("map_ map2_ apply_".split(), "host_compute"),
    "mro": "introspection",
    "__annotations__": "introspection",
    # ctypes re-exported by a module (`torch.ctypes`: memory at any address, red-team round 22)
    # or NumPy's view of an array's memory through it.
    "ctypes": "introspection",
    "_ctypes": "introspection",
    # The interpreter's own modules as any object's attribute: a module re-exported by another
    # (`torch.sys`) is judged as its real name (_reexported_module), but an allowed module
    # reached through a container, a default argument or a class attribute is no path the
    # checks can follow (`[torch][0].sys`); nor a module's lazy attributes by name.
    **dict.fromkeys(
        "sys builtins importlib gc inspect subprocess marshal mmap runpy __getattr__".split(),
        "introspection",
    ),
    "ctypeslib": "introspection",  # (NumPy's ctypes bridge)
    # A string annotation's ForwardRef evaluated by hand (`List["exec"].__args__[0]._evaluate(
    # {}, {}, frozenset())` is the builtin exec: red-team round 26).
    **dict.fromkeys(
        "_evaluate __forward_arg__ __forward_code__ _eval_type evaluate_forward_ref".split(),
        "introspection",
    ),
    # os's process control as any object's attribute (os reached by a path no check follows).
    **dict.fromkeys(
        "system popen fork forkpty posix_spawn posix_spawnp execl execle execlp execlpe execv "
        "execve execvp execvpe spawnl spawnle spawnlp spawnlpe spawnv spawnve spawnvp spawnvpe "
        "setsid setpgid setpgrp killpg memfd_create pidfd_open register_at_fork".split(),
        "process_control",
    ),
    "data_ptr": "global_state",
    "_cdata": "global_state",
    "Model": "reference_access",
}
# ... and os and NumPy the same way where the rule set does not allow importing them
# (`[torch][0].os.system`, `[F][0].np`: red-team round 26; torch, torch.nn.functional and
# torch.storage hold them). (Not `numpy`: Tensor.numpy, which the runner stands in for.)
_MODULE_ATTRIBUTES = {"os": "os", "np": "numpy"}
_COMPILE_NAMES = tuple(
    "torch.compile torch.jit torch._dynamo torch._inductor torch.fx torch.export "
    "torch.compiler".split()
)
_REGISTRATION_NAMES = tuple(
    "torch.library torch._library torch.ops.load_library torch.ops.import_module "
    "torch.classes.load_library".split()
)
_PRECISION_NAMES = frozenset(
    "set_float32_matmul_precision set_default_dtype set_default_tensor_type set_default_device "
    "set_flush_denormal use_deterministic_algorithms set_deterministic_debug_mode".split()
)
_BACKEND_SETTERS = ("set_", "enable_", "disable_", "preferred_", "flags", "sdp_kernel")
_STREAM_NAMES = tuple(
    "torch.cuda.Stream torch.cuda.stream torch.cuda.set_stream torch.cuda.ExternalStream "
    "torch.cuda.StreamContext torch.cuda.Event torch.cuda.graph torch.cuda.CUDAGraph "
    "torch.cuda.make_graphed_callables torch.cuda.streams torch.cuda.graphs torch.Stream "
    "torch.Event".split()
)
_TENSOR_BASES = frozenset(
    "torch.Tensor torch._C.TensorBase torch._C._TensorBase torch.nn.Parameter "
    "torch.nn.parameter.Parameter torch.nn.Buffer torch.nn.parameter.Buffer "
    "torch.overrides.TorchFunctionMode torch.utils._python_dispatch.TorchDispatchMode".split()
)
_TORCH_HOOKS = frozenset({"__torch_function__", "__torch_dispatch__"})
_CPP_BUILDERS = frozenset(
    {"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"}
)
_MUTATORS = frozenset(
    "append extend insert add update setdefault pop popitem clear remove discard appendleft "
    "extendleft __setitem__ __delitem__".split()
)
# `add` is left out for self: `self.bias.add(x)` is a tensor op, not a container mutation.
_SELF_MUTATORS = _MUTATORS - {"add"} | {"register_buffer", "register_parameter", "register_module"}
# The most positional arguments each mutator takes: a call with more (self.ops.update(x, lo, hi)
# into an extension's kernel named `update`) cannot be that container's method.
_MUTATOR_ARITY = {
    **dict.fromkeys("popitem clear".split(), 0),
    **dict.fromkeys("append extend add update remove discard appendleft extendleft".split(), 1),
    **dict.fromkeys("__delitem__".split(), 1),
    **dict.fromkeys("insert setdefault pop __setitem__ register_parameter".split(), 2),
    "register_module": 2,
    "register_buffer": 3,
}
_ARG_CACHES = frozenset({"functools.lru_cache", "functools.cache"})
_FORWARD_NAMES = frozenset({"forward", "__call__"})
# Private torch helpers that only do arithmetic on shapes and tuples, which code written from
# torch's own modules copies (nn.Linear's bias init, nn.Conv3d's kernel-size tuples).
_PRIVATE_HELPERS = frozenset(
    "torch.nn.init._calculate_fan_in_and_fan_out torch.nn.init._calculate_correct_fan "
    "torch.nn.modules.utils._single torch.nn.modules.utils._pair torch.nn.modules.utils._triple "
    "torch.nn.modules.utils._quadruple torch.nn.modules.utils._ntuple".split()
)
# getattr(self..., f"weight_ih_l{k}"): nn.RNN/LSTM/GRU parameters, or submodules, by layer. A
# name built from one of these prefixes reaches parameters and layers, never anything the rules
# forbid (a torch op so reached, torch.norm say, is still refused at run time).
_PARAMETER_PREFIXES = (
    "weight",
    "bias",
    "layer",
    "conv",
    "fc",
    "bn",
    "block",
    "linear",
    "norm",
    "cell",
    "proj",
    "w",
    "b",
    "param",
    "gate",
    "embed",
    "head",
    "attn",
    "mlp",
    "ln",
    "stage",
    "down",
    "up",
    "res",
    "enc",
    "dec",
    "expert",
)
# `self.w = self.w.to(x.device)` in forward: the same value, moved; not state of the calls.
_MOVES = frozenset({"to", "cuda", "contiguous"})
# The buffers of torch's normalisation layers that their forward rebinds in training mode.
_NORM_STATISTICS = frozenset({"running_mean", "running_var", "num_batches_tracked"})

_MESSAGES = {
    "syntax": "model_new.py does not parse ({error}); fix the syntax.",
    "try": "try/except is not allowed (a fallback hides a failing kernel); let errors propagate "
    "and fix the kernel instead.",
    "exit": "Defining `{name}` is not allowed (a context manager can swallow exceptions); let "
    "errors propagate and fix the kernel instead.",
    "import": "Importing `{name}` is not allowed; import only torch (public modules), your "
    "kernels (kernels_ext, load_inline, cupy, triton) and {modules}.",
    "process_control": "`{name}` controls processes, signals or file descriptors; read "
    "os.environ and use os.path freely, but do all work in this process through your kernels.",
    "relative": "Relative imports are not allowed; import torch or kernels_ext by name.",
    "reexport": "`{name}` is `{module}` (a module's imports are its attributes), which "
    "solutions may not use; import only torch (public modules), your kernels "
    "(kernels_ext, load_inline, cupy, triton) and {modules}.",
    "star": "`from {name} import *` is not allowed; import the names you use explicitly.",
    "reference_import": "Importing `{name}` reaches the reference; implement the computation "
    "in your own kernels instead.",
    "Model": "The reference `Model` must not be used; write ModelNew(nn.Module) with your own "
    "kernels instead.",
    "dynamic": "`{name}` is not allowed; write plain code that calls your kernels directly.",
    "type3": "Three-argument `type()` is not allowed; define classes with a class statement.",
    "attr_name": "`{name}()` needs a string literal attribute name; access the attribute directly.",
    "attr_by_string": "`{name}` reaches attributes named by strings, which these checks cannot "
    "read; access attributes directly.",
    "eval_by_string": "`{name}` evaluates annotations written as strings (code these checks "
    "cannot read); write types as plain names.",
    "load_by_string": "`{name}` finds objects by names written as strings, or loads code from "
    "data, which these checks cannot read; import and call what you need directly.",
    "attr_module": "`{name}()` on an imported module is not allowed; use `module.attribute` "
    "directly and never replace it.",
    "introspection": "`{name}` reaches interpreter or harness state; use only your module's "
    "own attributes and the forward arguments.",
    "monkey_patch": "Assigning or deleting `{name}` patches an imported module; change only your "
    "own objects, such as attributes of self in __init__.",
    "precision_flags": "`{name}` changes the harness's numerics or determinism; leave global "
    "settings alone and choose precision inside your kernel.",
    "torch_compile": "`{name}` compiles PyTorch code; implement the computation in your own "
    "kernels instead.",
    "host_compute": "`{name}` runs Python on every element of a tensor; compute in your own "
    "kernels.",
    "memoryview": "`memoryview` gathers raw memory in the interpreter (a strided view's "
    "tobytes() of a tensor's bytes is a transpose done by Python: red-team round 23); move and "
    "compute data with your own kernels.",
    "array_protocol": "`{name}` hands memory to NumPy (an array over a tensor's data computes "
    "with NumPy, not your kernels); compute in your own kernels.",
    "super_args": "`super({name}, ...)` may reach the methods of a class this file does not "
    "define (torch.Tensor's C base, past the judge's stand-ins); use super() or "
    "super(YourClass, self).",
    "tensor_subclass": "`{name}` subclasses or intercepts torch tensors; return plain "
    "torch.Tensor outputs computed by your kernels.",
    "side_stream": "`{name}` is not allowed; launch every kernel on the current stream so the "
    "timer sees all of the work.",
    "op_registration": "`{name}` registers operators globally; expose your kernels through "
    "kernels_ext or a load_inline Python module instead.",
    "cpp_build": "Build extensions as Python modules with explicit keyword arguments (no "
    "is_python_module=False, no **kwargs) and call their functions directly.",
    "pointer": "`{name}` is not allowed in Python (it keys caches by pointer); compute every "
    "output from the current inputs.",
    "global": "`{name}` keeps state across calls; load extensions at module level and create "
    "parameters and buffers in __init__.",
    "module_state": "`{name}` mutates module-level state inside a function; compute every output "
    "from the current inputs.",
    "arg_cache": "`@{name}` caches results by argument; compute every output from the current "
    "inputs.",
    "forward_state": "`{name}` stores state on the module inside forward, which carries results "
    "across calls; create parameters and buffers in __init__ and only read them in forward.",
    "arg_default": "The mutable default argument `{name}` keeps state across calls; use None "
    "and compute every output from the current inputs.",
    "private_api": "`{name}` is a private torch API; use only public torch functions for "
    "allocation and views, and your own kernels for compute.",
}


@dataclass(frozen=True)
class StaticViolation:
    """One rule broken by a solution's source.

    Attributes:
        rule: Short code, a key of RULES.
        line: 1-based line of the offending code, 0 if unknown.
        message: One sentence for the agent: what is forbidden and what to do instead.
    """

    rule: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.rule} (line {self.line}): {self.message}"


@dataclass(frozen=True)
class _Module:
    """What the checks need to know about a parsed solution.

    Attributes:
        tree: The parsed source.
        aliases: Local name -> dotted path it stands for (`F` -> `torch.nn.functional`), from
            imports and from plain assignments of such paths (`E = torch.cuda.Event`).
        bindings: Module-level names bound by assignment, def or class (not by import).
        containers: The bindings whose value is a mutable container (dict, list, set, ...).
        targets: id() of every node on the object chain of an assignment or del target.
        called: id() of every node that is the function of a call.
        allow_streams: Whether side streams, events and graphs are allowed.
        rules: The rule set, one of RULE_SETS.
        state_names: Attributes the task's own forward stores on self (`reference_state`):
            forward may store them too.
    """

    tree: ast.Module
    aliases: dict[str, str]
    bindings: frozenset[str]
    containers: frozenset[str]
    targets: frozenset[int]
    called: frozenset[int]
    allow_streams: bool
    rules: str = "env"
    state_names: frozenset[str] = frozenset()


def check_solution_source(
    source: str,
    *,
    allow_streams: bool = False,
    rules: str = "env",
    state_names: frozenset[str] = frozenset(),
) -> list[StaticViolation]:
    """Check a solution's source against every rule in RULES, without running it.

    Args:
        source: The text of model_new.py.
        allow_streams: Allow side streams, events and CUDA graphs (the `side_stream` rule).
        rules: "env" (the environment's rules) or "external" (code written elsewhere: more
            standard-library modules, os without process control, os.environ writes).
        state_names: Attributes forward may store on self, because the task's own forward
            does (`reference_state`: a recurrent cell's `self.hidden`). The judge gives every
            call the state the model was built with, so nothing stored carries over.

    Returns:
        The violations sorted by line, at most one per rule and line; empty for a clean
        solution. Never raises: a source that does not parse gives one "syntax" violation.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [StaticViolation("syntax", exc.lineno or 0, _message("syntax", error=exc.msg))]
    except (ValueError, RecursionError, MemoryError) as exc:
        return [StaticViolation("syntax", 0, _message("syntax", error=str(exc) or "too deep"))]
    if rules not in RULE_SETS:
        raise ValueError(f"unknown rule set {rules!r}; use one of {RULE_SETS}")
    tree = _without_main_block(tree)
    mod = _analyse(tree, allow_streams, rules, state_names)
    checks = (
        _check_try,
        _check_lookup_hooks,
        _check_imports,
        _check_names,
        _check_attributes,
        _check_calls,
        _check_array_protocol,
    )
    found: dict[tuple[str, int], StaticViolation] = {}
    for check in (*checks, _check_stores, _check_classes, _check_state):
        for violation in check(mod):
            found.setdefault((violation.rule, violation.line), violation)
    return sorted(found.values(), key=lambda v: (v.line, v.rule))


def _without_main_block(tree: ast.Module) -> ast.Module:
    """The module without its `if __name__ == "__main__":` blocks, which the judge never runs.

    It imports model_new.py under another name; a source that could rename itself (binding
    `__name__` anywhere, or naming it in a string) keeps its blocks and their checks.
    """

    def is_main(node: ast.stmt) -> bool:
        test = node.test if isinstance(node, ast.If) else None
        return (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__"
            and not node.orelse
        )

    for node in ast.walk(tree):
        if (
            (
                isinstance(node, ast.Name)
                and node.id == "__name__"
                and not isinstance(node.ctx, ast.Load)
            )
            or (isinstance(node, (ast.Global, ast.Nonlocal)) and "__name__" in node.names)
            or (isinstance(node, ast.alias) and node.asname == "__name__")
            or (isinstance(node, ast.Constant) and node.value == "__name__")
            or (isinstance(node, ast.arg) and node.arg == "__name__")
            or (isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name == "__name__")
        ):
            return tree
    if not any(is_main(node) for node in tree.body):
        return tree
    return ast.Module(body=[n for n in tree.body if not is_main(n)], type_ignores=tree.type_ignores)


def compiles_at_first_call(source: str) -> bool:
    """Whether model_new.py imports triton or cupy, whose kernels compile at their first call.

    (Triton's also autotune there; CuPy's RawKernel and ElementwiseKernel compile with NVRTC.)
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] in ("triton", "cupy") for name in names):
            return True
    return False


def check_native_sources(sources: dict[str, str]) -> list[StaticViolation]:
    """Scan C++/CUDA sources (kernels/ files, load_inline strings) for dispatcher bypasses.

    Each source is preprocessed first (backslash-newlines joined, comments dropped:
    cuda_gym.judge.native_checks.preprocess), so a token split across lines or hidden in a
    comment-separated form is still seen; `#include` may only name workspace files by relative
    path and toolchain headers.

    Args:
        sources: Source text by display name (e.g. "kernels/k.cu").
    """
    from cuda_gym.judge.native_checks import include_violations, preprocess

    found = []
    texts = {name: preprocess(raw) for name, raw in sources.items()}
    registrations = frozenset(
        m.group(1) for text in texts.values() for m in _REGISTRATION.finditer(text)
    )
    for name, text in texts.items():
        # Each line with its C literals' escapes decoded beside it (a token spelled "\x50y...").
        scanned = [line + " " + _decoded_literals(line) for line in text.splitlines()]
        for lineno, line in enumerate(scanned, 1):
            word = _NATIVE_FORBIDDEN_WORDS.search(line) or _ASSEMBLER_FILES.search(line)
            token = next((t for t in NATIVE_FORBIDDEN_TOKENS if t in line), None) or (
                word and word.group()
            )
            if token:
                found.append(
                    StaticViolation(
                        "dispatcher_bypass",
                        lineno,
                        f"`{token}` in {name} reaches the dispatcher's internals, computes "
                        "below it, looks functions up or runs Python by name at run time, "
                        "reads files into the build or hands memory to Python's buffer copies; "
                        "call your kernels directly and leave dispatch keys alone.",
                    )
                )
                break
        for lineno, line in enumerate(text.splitlines(), 1):
            # (Leading hashes are a directive's or a markdown heading's in a docstring.)
            code = _STRING_LITERAL.sub('""', line).lstrip().lstrip("#")
            macro = next((m for m in PASTING_MACROS if m in code), None)
            if _PASTE.search(code) or macro:
                what = f"`{macro}`" if macro else "`##`"
                found.append(
                    StaticViolation(
                        "token_pasting",
                        lineno,
                        f"{what} in {name} pastes identifiers together, which hides the names "
                        "from this scan; write every identifier out in full (`, ##__VA_ARGS__` "
                        "is fine).",
                    )
                )
                break
        reach = _python_reach(text, scanned, registrations)
        if reach:
            lineno, what = reach
            found.append(
                StaticViolation(
                    "python_from_native",
                    lineno,
                    f"`{what}` in {name} reaches Python's objects; {RULES['python_from_native']}",
                )
            )
        copies = _first_match(scanned, _KERNEL_COPIES)
        if copies:
            lineno, what = copies
            found.append(
                StaticViolation(
                    "kernel_copies",
                    lineno,
                    f"`{what}` in {name} has the operating system move data; "
                    f"{RULES['kernel_copies']}",
                )
            )
        for lineno, message in include_violations(text, name, sources.keys())[:1]:
            found.append(StaticViolation("native_include", lineno, f"{name}: {message}"))
    return found


_C_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|[0-7]{1,3}|.)")
_SIMPLE_ESCAPES = dict(zip("ntrabfv", "\n\t\r\a\b\f\v"))


def _decoded_literals(line: str) -> str:
    """The line's C string and character literals with their escapes decoded, joined by spaces.

    (Only the literals that hold an escape: the rest are scanned as written.)
    """

    def char(match: re.Match) -> str:
        code = match.group(1)
        if code[0] in "xuU" and len(code) > 1:
            return chr(int(code[1:], 16))
        if code[0] in "01234567":
            return chr(int(code, 8))
        return _SIMPLE_ESCAPES.get(code, code)

    return " ".join(
        _C_ESCAPE.sub(char, literal[1:-1])
        for literal in _STRING_LITERAL.findall(line)
        if "\\" in literal
    )


_DOCSTRING_READERS = re.compile(r"__doc__|__file__|\bopen\b|read_text|read_bytes")


def string_constants(source: str) -> list[str]:
    """Every string literal of a Python source (load_inline sources live there).

    Docstrings are prose (one may name `at::native::` to explain what a kernel replaces), so
    they are left out, unless the source could read one (`__doc__`, or its own file through
    `__file__`, `open`, `read_text`/`read_bytes`): then a docstring may be C++.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    docstrings = set()
    if not _DOCSTRING_READERS.search(source):
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (
                isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                docstrings.add(id(body[0].value))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def _message(key: str, **fields: str) -> str:
    return _MESSAGES[key].format(**fields)


def _at(
    node: ast.AST, rule: str, key: str | None = None, name: str = "", **fields: str
) -> StaticViolation:
    line = getattr(node, "lineno", 0)
    return StaticViolation(rule, line, _message(key or rule, name=name, **fields))


def _module_list(rules: str) -> str:
    """The rule set's standard-library modules, for the import message."""
    names = sorted(ALLOWED_MODULES[rules] - {"torch", "kernels_ext", "cupy", "triton"})
    return ", ".join(names[:-1]) + " and " + names[-1]


def _code(node: ast.AST) -> str:
    """Short source text of `node`, for messages."""
    try:
        text = ast.unparse(node)
    except RecursionError:
        return type(node).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _qualified_name(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The dotted path an attribute chain stands for, or None if it does not start at an import."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".".join([aliases[node.id], *reversed(parts)])
    return None


def _root(node: ast.AST, *, through_calls: bool = False) -> ast.AST:
    """The innermost object of `a.b[c].d` (and of `a.f(x).b` when through_calls)."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif through_calls and isinstance(node, ast.Call):
            node = node.func
        else:
            return node


def _is_store(node: ast.AST) -> bool:
    """An attribute or item target of an assignment, augmented assignment or del."""
    return isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(
        node.ctx, (ast.Store, ast.Del)
    )


def _has_params(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> bool:
    a = fn.args
    return bool(a.posonlyargs or a.args or a.kwonlyargs or a.vararg or a.kwarg)


def _analyse(
    tree: ast.Module,
    allow_streams: bool,
    rules: str = "env",
    state_names: frozenset[str] = frozenset(),
) -> _Module:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.partition(".")[0]
                aliases[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    _add_assigned_aliases(tree, aliases)
    bindings, containers = set(), set()
    for stmt in tree.body:
        if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
            bindings.add(stmt.name)
        for target in getattr(stmt, "targets", [getattr(stmt, "target", None)]):
            if isinstance(target, ast.Name) and target.id not in aliases:
                bindings.add(target.id)
                if _is_container(getattr(stmt, "value", None), aliases):
                    containers.add(target.id)
    targets = set()
    for node in filter(_is_store, ast.walk(tree)):
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            targets.add(id(node))
            node = node.value
        targets.add(id(node))
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return _Module(
        tree,
        aliases,
        frozenset(bindings),
        frozenset(containers),
        frozenset(targets),
        frozenset(called),
        allow_streams,
        rules,
        state_names,
    )


def _add_assigned_aliases(tree: ast.Module, aliases: dict[str, str]) -> None:
    """Follow `E = torch.cuda.Event` so that `E(...)` is seen as `torch.cuda.Event(...)`."""
    assigns = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))]
    changed = True
    while changed:
        changed = False
        for node in assigns:
            name = node.value and _qualified_name(node.value, aliases)
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                # The first binding wins, so two assignments cannot flip a name back and forth.
                if name and isinstance(target, ast.Name) and target.id not in aliases:
                    aliases[target.id] = name
                    changed = True


def _is_container(value: ast.AST | None, aliases: dict[str, str]) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if not isinstance(value, ast.Call):
        return False
    if isinstance(value.func, ast.Name) and value.func.id in ("dict", "list", "set", "bytearray"):
        return True
    return (_qualified_name(value.func, aliases) or "").startswith("collections.")


# A class's own attribute lookup answers names no check sees spelled (`"__array_" +
# "interface__"` served to NumPy: red-team round 26); a module's, names it was never given.
_LOOKUP_HOOKS = frozenset({"__getattr__", "__getattribute__"})


def _check_lookup_hooks(mod: _Module) -> Iterator[StaticViolation]:
    """A definition of `__getattr__` or `__getattribute__`, in a class or at module level."""
    for node in ast.walk(mod.tree):
        if isinstance(node, _FUNCTIONS) and node.name in _LOOKUP_HOOKS:
            yield _at(node, "introspection", name=node.name)


def _check_try(mod: _Module) -> Iterator[StaticViolation]:
    for node in ast.walk(mod.tree):
        if isinstance(node, _TRY_NODES) and node.handlers:
            yield _at(node, "try_except", "try")
        elif isinstance(node, _FUNCTIONS) and node.name in ("__exit__", "__aexit__"):
            yield _at(node, "try_except", "exit", node.name)


def _check_imports(mod: _Module) -> Iterator[StaticViolation]:
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _check_module(node, alias.name, mod.rules)
        elif isinstance(node, ast.ImportFrom) and node.level:
            yield _at(node, "forbidden_import", "relative")
        elif isinstance(node, ast.ImportFrom):
            yield from _check_module(node, node.module or "", mod.rules)
            for alias in node.names:
                if alias.name == "*":
                    yield _at(node, "forbidden_import", "star", node.module or "")
                else:
                    yield from _check_module(node, f"{node.module}.{alias.name}", mod.rules)


def _check_module(node: ast.AST, module: str, rules: str) -> Iterator[StaticViolation]:
    top = module.partition(".")[0]
    reached = _reexported_module(module, rules)
    if reached is not None:
        yield _at(
            node,
            "forbidden_import",
            "reexport",
            module,
            module=reached,
            modules=_module_list(rules),
        )
    elif top in REFERENCE_MODULES:
        yield _at(node, "reference_access", "reference_import", module)
    elif top not in ALLOWED_MODULES[rules] or _under(module, FORBIDDEN_TORCH_MODULES):
        yield _at(node, "forbidden_import", "import", module, modules=_module_list(rules))
    elif top == "torch" and _is_private(module):
        yield _at(node, "private_api", name=module)
    elif _is_os_control(module):
        yield _at(node, "process_control", name=module)


# The solution's own modules: never imported by the judge.
_OWN_MODULES = frozenset({"kernels_ext"})
# The builtins the rules refuse by name, by identity: reached as another module's attribute.
_DANGEROUS_BUILTINS = {
    id(getattr(builtins, n)): n for n in _DYNAMIC_CALLS | _ATTR_FUNCTIONS if hasattr(builtins, n)
}


@functools.lru_cache(maxsize=4096)
def _reexported_module(name: str, rules: str) -> str | None:
    """What `name` really is when it reaches a forbidden module through an allowed one.

    A module's imports are its attributes: `torch.sys`, `typing.sys`, `torch.builtins`,
    `torch.os.system`, `from torch import os` are sys, builtins and os under other names. The
    path is followed in the judge's own copies of the allowed modules, reading each step
    statically (no module's `__getattr__` runs, nothing is called). A module reached under
    another name than its own goes on as its real name: that path must pass the rules an
    import of it would. Returns the real path when it does not, else None (also when the path
    cannot be followed: a name the judge's copy lacks fails in the solution too).
    """
    parts = name.split(".")
    top = parts[0]
    if top not in ALLOWED_MODULES[rules] or top in _OWN_MODULES or len(parts) < 2:
        return None
    obj = sys.modules.get(top)
    if obj is None:
        try:
            obj = importlib.import_module(top)
        except Exception:  # not installed here: the solution's import fails as well
            return None
    for k, part in enumerate(parts[1:], start=2):
        try:
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            obj = _submodule(obj, part)
            if obj is None:
                return None
        if not isinstance(obj, types.ModuleType):
            builtin = _DANGEROUS_BUILTINS.get(id(obj))
            if builtin is not None and obj is getattr(builtins, builtin, None):
                return f"builtins.{builtin}"  # (`x.getattr`: a module's `from builtins import`)
            continue
        if sys.modules.get(".".join(parts[:k])) is obj:
            continue  # under its own name (os.path, torch.nn): the import rules judge it
        real = getattr(obj, "__name__", None)
        if not isinstance(real, str) or real == ".".join(parts[:k]):
            return None
        path = ".".join([real, *parts[k:]])
        if real.partition(".")[0] not in ALLOWED_MODULES[rules] or _under(
            real, FORBIDDEN_TORCH_MODULES
        ):
            return path
        if _is_os_control(path):
            return path
        return _reexported_module(path, rules)
    return None


def _submodule(obj: object, part: str) -> types.ModuleType | None:
    """`obj.part` when `obj` is a module and `part` a public submodule not imported yet."""
    if not isinstance(obj, types.ModuleType) or part.startswith("_"):
        return None
    name = f"{obj.__name__}.{part}"
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except Exception:  # no such module: the solution's path fails at run time too
        return None


def _is_os_control(name: str) -> bool:
    """`os.system`, `os.kill`, ... (and their spellings through os's own submodules)."""
    parts = name.split(".")
    return parts[0] == "os" and any(p in OS_FORBIDDEN for p in parts[1:])


def _check_names(mod: _Module) -> Iterator[StaticViolation]:
    # A builtin such as `input` used as a value (`o = open`) is flagged only where the source
    # never binds that name itself, so parameters and variables called `input` stay legal.
    bound = mod.aliases.keys() | mod.bindings | _bound_names(mod.tree)
    # A file that defines its own top-level `class Model` means that class by the name (the
    # runner imports model_new.py as a module of its own: the task's Model is not in reach).
    own_model = any(isinstance(n, ast.ClassDef) and n.name == "Model" for n in mod.tree.body)
    for node in ast.walk(mod.tree):
        if not isinstance(node, ast.Name):
            continue
        if node.id == "Model":
            if not own_model:
                yield _at(node, "reference_access", "Model")
        elif node.id in _INTROSPECTION_NAMES:
            yield _at(node, "introspection", name=node.id)
        elif node.id in _TORCH_HOOKS and isinstance(node.ctx, ast.Store):
            yield _at(node, "tensor_subclass", name=node.id)
        elif node.id in _DYNAMIC_CALLS | _ATTR_FUNCTIONS and node.id not in bound:
            if id(node) not in mod.called:
                yield _at(node, "dynamic_code", "dynamic", node.id)


def _bound_names(tree: ast.Module) -> set[str]:
    """Every name the source binds anywhere: variables, parameters, functions and classes."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            names.add(node.name)
    return names


def _check_attributes(mod: _Module) -> Iterator[StaticViolation]:
    formatted = _formatted_self_dicts(mod.tree) | _class_names(mod.tree) | _alignments(mod.tree)
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Attribute) and node.attr in _ATTRIBUTE_RULES:
            if id(node) not in formatted:
                yield _attribute_violation(node, node.attr)
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _MODULE_ATTRIBUTES
            and _MODULE_ATTRIBUTES[node.attr] not in ALLOWED_MODULES[mod.rules]
        ):
            yield _at(node, "introspection", name=node.attr)
        if not isinstance(node, (ast.Attribute, ast.Name)) or id(node) in mod.targets:
            continue
        name = _qualified_name(node, mod.aliases)
        reached = name and _reexported_module(name, mod.rules)
        if reached:
            yield _at(
                node,
                "forbidden_import",
                "reexport",
                name,
                module=reached,
                modules=_module_list(mod.rules),
            )
            continue
        rule = name and _name_rule(name, mod.allow_streams)
        if rule == "dynamic_code":
            key = (
                "eval_by_string"
                if name in _EVAL_BY_STRING
                else "load_by_string"
                if _under(name, _LOAD_BY_STRING)
                else "attr_by_string"
            )
            yield _at(node, rule, key, name)
        elif rule:
            yield _at(node, rule, name=name)


def _class_names(tree: ast.Module) -> set[int]:
    """The `x.__class__` nodes read for their name or handed to super() with their instance.

    `self.__class__.__name__` in a repr; `super(self.__class__, self).__init__()`.
    """
    found = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in ("__name__", "__qualname__")
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "__class__"
        and isinstance(node.value.value, ast.Name)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "super"
            and len(node.args) == 2
            and not node.keywords
            and isinstance(node.args[0], ast.Attribute)
            and node.args[0].attr == "__class__"
            and isinstance(node.args[0].value, ast.Name)
            and isinstance(node.args[1], ast.Name)
            and node.args[0].value.id == node.args[1].id
        ):
            found.add(id(node.args[0]))
    return found


# `x.data_ptr() % 16` and `x.data_ptr() & 15` tell an alignment (which kernel may load
# vectors), not which tensor it is: moduli up to a page take no more than a few values.
_ALIGNMENT_LIMIT = 4096


def _alignments(tree: ast.Module) -> set[int]:
    """The `x.data_ptr` nodes whose pointer is only read for its alignment."""
    found = set()
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, (ast.Mod, ast.BitAnd))
            and isinstance(node.left, ast.Call)
            and not node.left.args
            and not node.left.keywords
            and isinstance(node.left.func, ast.Attribute)
            and node.left.func.attr == "data_ptr"
            and isinstance(node.right, ast.Constant)
            and type(node.right.value) is int
        ):
            continue
        limit = node.right.value + isinstance(node.op, ast.BitAnd)
        if 0 < limit <= _ALIGNMENT_LIMIT:
            found.add(id(node.left.func))
    return found


def _formatted_self_dicts(tree: ast.Module) -> set[int]:
    """The `self.__dict__` nodes that only fill a literal's plain fields into a string.

    `"{eps}, momentum={momentum}".format(**self.__dict__)`: nn.BatchNorm's extra_repr.
    """
    found = set()
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format"
            and isinstance(node.func.value, ast.Constant)
            and isinstance(node.func.value.value, str)
        ):
            continue
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(node.func.value.value) if f]
        except ValueError:
            continue
        if not all(f.isidentifier() for f in fields):
            continue  # "{x.attr}" or "{x[k]}" would reach further than the values
        for keyword in node.keywords:
            value = keyword.value
            if (
                keyword.arg is None
                and isinstance(value, ast.Attribute)
                and value.attr == "__dict__"
                and isinstance(value.value, ast.Name)
                and value.value.id == "self"
            ):
                found.add(id(value))
    return found


def _attribute_violation(node: ast.AST, attr: str) -> StaticViolation:
    rule = _ATTRIBUTE_RULES[attr]
    key = {"global_state": "pointer", "reference_access": "Model"}.get(rule, rule)
    return _at(node, rule, key, attr)


def _is_private(name: str) -> bool:
    """A torch path with a private component (`torch._C`, `x._internal`).

    Dunders and _PRIVATE_HELPERS excepted.
    """
    return name not in _PRIVATE_HELPERS and any(
        part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
        for part in name.split(".")[1:]
    )


def _name_rule(name: str, allow_streams: bool) -> str | None:
    """The rule that a use of the dotted path `name` breaks, if any."""
    if name in _ATTR_BY_STRING or name in _EVAL_BY_STRING or _under(name, _LOAD_BY_STRING):
        return "dynamic_code"
    if _under(name, _COMPILE_NAMES):
        return "torch_compile"
    if _under(name, _REGISTRATION_NAMES):
        return "op_registration"
    module, _, last = name.rpartition(".")
    if (module == "torch" and last in _PRECISION_NAMES) or name.startswith("torch._C._set_"):
        return "precision_flags"
    if module.startswith("torch.backends") and last.startswith(_BACKEND_SETTERS):
        return "precision_flags"
    if not allow_streams and _under(name, _STREAM_NAMES):
        return "side_stream"
    if _is_os_control(name):
        return "process_control"
    parts = name.split(".")
    if parts[0] == "torch" and _is_private(name) and not set(parts) & _ATTRIBUTE_RULES.keys():
        return "private_api"
    return None


def _plain_supers(tree: ast.Module) -> set[int]:
    """id() of the super(...) calls that reach no method but their own class's base's.

    `super(A, self)` for a class A of the file's; `super(self.__class__, self).__init__()` and
    `super(type(self), self).__init__()` (code written elsewhere). Any other first argument
    (`super(torch.Tensor, x).tolist()`) reaches torch.Tensor's C base, past the runner's
    stand-ins.
    """
    classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    plain = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
            if node.args[0].id in classes:
                plain.add(id(node))
        init = isinstance(node, ast.Attribute) and node.attr == "__init__"
        call = node.value if init else None
        if isinstance(call, ast.Call) and len(call.args) == 2 and _code(call.args[1]) == "self":
            if _code(call.args[0]) in ("self.__class__", "type(self)"):
                plain.add(id(call))
    return plain


# NumPy's protocols for wrapping memory it does not own: a class of the solution's whose
# `__array_interface__` names a tensor's address (its extension returns `data_ptr()` as an int)
# gives NumPy the tensor's data, and NumPy does the task (red-team round 21: transposes, GEMMs,
# memoryview slices of such arrays; reward 1 under the `external` rules).
# So does a DLPack capsule of the solution's own, handed over by a class's `__dlpack__`
# (`np.from_dlpack`: round 21's bypass of the first fix).
ARRAY_PROTOCOL_NAMES = frozenset(
    {"__array_interface__", "__array_struct__", "__array__", "__dlpack__", "__dlpack_device__"}
)


def _check_array_protocol(mod: _Module) -> Iterator[StaticViolation]:
    """Any mention of ARRAY_PROTOCOL_NAMES: a name, attribute, definition, keyword or string."""
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            name = node.name
        elif isinstance(node, ast.keyword):
            name = node.arg
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value.strip()
        else:
            continue
        if name in ARRAY_PROTOCOL_NAMES:
            yield StaticViolation(
                "host_compute", getattr(node, "lineno", 0), _message("array_protocol", name=name)
            )
        elif name == "memoryview":
            yield StaticViolation(
                "host_compute", getattr(node, "lineno", 0), _message("memoryview", name=name)
            )


def _check_calls(mod: _Module) -> Iterator[StaticViolation]:
    shadowed = mod.aliases.keys() | mod.bindings
    plain_supers = _plain_supers(mod.tree)
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Name) and node.id == "super" and id(node) not in mod.called:
            yield _at(node, "introspection", name="super")  # (to be called under a new name)
        if not isinstance(node, ast.Call):
            continue
        if _is_name(node.func, "super", shadowed) and node.args and id(node) not in plain_supers:
            yield _at(node, "introspection", "super_args", _code(node.args[0]))
        func, name = node.func, _qualified_name(node.func, mod.aliases)
        if isinstance(func, ast.Name) and func.id not in shadowed:
            yield from _check_builtin_call(node, func.id, mod)
        elif isinstance(func, ast.Attribute) and func.attr == "compile" and name is None:
            yield _at(node, "torch_compile", name=_code(func))  # nn.Module.compile()
        if name in _CPP_BUILDERS and any(
            k.arg is None or (k.arg == "is_python_module" and not _is_true(k.value))
            for k in node.keywords
        ):
            yield _at(node, "op_registration", "cpp_build")


def _is_name(node: ast.AST, name: str, shadowed: set) -> bool:
    return isinstance(node, ast.Name) and node.id == name and name not in shadowed


def _is_true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _reads_only(node: ast.Call) -> bool:
    """Whether an open() call opens for reading: no mode, or a constant one without w/a/x/+."""
    mode = node.args[1] if len(node.args) > 1 else None
    for keyword in node.keywords:
        if keyword.arg == "mode":
            mode = keyword.value
        elif keyword.arg is None or keyword.arg == "opener":
            return False
    if mode is None:
        return True
    return (
        isinstance(mode, ast.Constant)
        and isinstance(mode.value, str)
        and not set(mode.value) & set("wax+")
    )


def _check_builtin_call(node: ast.Call, name: str, mod: _Module) -> Iterator[StaticViolation]:
    if name == "open" and mod.rules == "external" and _reads_only(node):
        # Code written elsewhere reads its C++ from a file beside it; the sandbox shows it
        # nothing else worth reading (pathlib's read_text is allowed under these rules too).
        return
    if name in _DYNAMIC_CALLS:
        yield _at(node, "dynamic_code", "dynamic", f"{name}()")
    elif name == "type" and len(node.args) == 3:
        yield _at(node, "dynamic_code", "type3")

    elif name in _ATTR_FUNCTIONS:
        attr = node.args[1] if len(node.args) > 1 else None
        if (
            name in ("getattr", "setattr")
            and attr is not None
            and _parameter_name(node.args[0], attr)
        ):
            return  # (a store on self inside forward is refused by _check_forward)
        if not (isinstance(attr, ast.Constant) and isinstance(attr.value, str)):
            yield _at(node, "dynamic_code", "attr_name", name)
        elif attr.value in _ATTRIBUTE_RULES:
            yield _attribute_violation(node, attr.value)
        elif _qualified_name(node.args[0], mod.aliases) is not None:
            yield _at(node, "dynamic_code", "attr_module", name)


def _parameter_name(owner: ast.AST, attr: ast.AST) -> bool:
    """Whether getattr/setattr(owner, attr) reaches a parameter of self by a built name.

    The name starts with a literal in _PARAMETER_PREFIXES: f"weight_ih_l{k}",
    "weight_hh_l" + s, "bias_ih_l%d" % k.
    """
    root = _root(owner)
    if not (isinstance(root, ast.Name) and root.id == "self"):
        return False
    if isinstance(attr, ast.JoinedStr) and attr.values:
        head = attr.values[0]
    elif isinstance(attr, ast.BinOp) and isinstance(attr.op, (ast.Add, ast.Mod)):
        head = attr.left
        while isinstance(head, ast.BinOp) and isinstance(head.op, ast.Add):
            head = head.left
    else:
        return False
    return (
        isinstance(head, ast.Constant)
        and isinstance(head.value, str)
        and head.value.startswith(_PARAMETER_PREFIXES)
    )


def _check_stores(mod: _Module) -> Iterator[StaticViolation]:
    for node in filter(_is_store, ast.walk(mod.tree)):
        root = _root(node)
        if isinstance(root, ast.Name) and root.id in mod.aliases:
            if mod.rules == "external" and _is_environ_item(node, mod.aliases):
                continue  # os.environ["TORCH_CUDA_ARCH_LIST"] = ...: the process's own settings
            name = _qualified_name(node, mod.aliases) or mod.aliases[root.id]
            rule = "precision_flags" if _under(name, ("torch.backends",)) else "monkey_patch"
            yield _at(node, rule, name=_code(node))


def _is_environ_item(node: ast.AST, aliases: dict[str, str]) -> bool:
    """`os.environ[key]` as an assignment or del target."""
    return isinstance(node, ast.Subscript) and _qualified_name(node.value, aliases) == "os.environ"


def _check_classes(mod: _Module) -> Iterator[StaticViolation]:
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if _qualified_name(base, mod.aliases) in _TENSOR_BASES:
                    yield _at(node, "tensor_subclass", name=f"class {node.name}({_code(base)})")
        elif isinstance(node, _FUNCTIONS) and node.name in _TORCH_HOOKS:
            yield _at(node, "tensor_subclass", name=node.name)


def _check_state(mod: _Module) -> Iterator[StaticViolation]:
    for node in ast.walk(mod.tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            yield _at(node, "global_state", "global", _code(node))
        elif isinstance(node, ast.ClassDef):
            # A buffer of its own may be rebound in forward (BatchNorm's running statistics),
            # as it may be written in place with copy_: neither reaches an output unread.
            allowed = mod.state_names | _registered_buffers(node)
            for method in node.body:
                if isinstance(method, _FUNCTIONS) and method.name in _FORWARD_NAMES:
                    yield from _check_forward(method, allowed)
        elif isinstance(node, (*_FUNCTIONS, ast.Lambda)):
            yield from _check_module_mutation(node, mod)
            yield from _check_mutable_defaults(node)
            if not isinstance(node, ast.Lambda):
                yield from _check_argument_cache(node, mod)


def _check_mutable_defaults(
    fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
) -> Iterator[StaticViolation]:
    """A dict/list/set default argument is shared by every call: a cache in disguise.

    A list of constants as a default of `__init__` is a reference's own signature
    (`depths=[2, 2, 6, 2]` in KernelBench's Swin models): the module is made once.
    """
    for default in [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]:
        if (
            getattr(fn, "name", None) == "__init__"
            and isinstance(default, ast.List)
            and all(isinstance(e, ast.Constant) for e in default.elts)
        ):
            continue
        mutable = isinstance(default, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp))
        if isinstance(default, ast.Call) and isinstance(default.func, ast.Name):
            mutable = mutable or default.func.id in {"dict", "list", "set", "defaultdict"}
        if mutable:
            yield _at(default, "global_state", "arg_default", _code(default))


def _check_argument_cache(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, mod: _Module
) -> Iterator[StaticViolation]:
    """functools.cache / lru_cache on a function with parameters: a cache keyed by argument.

    Not on a function that builds an extension (load_inline / cpp_extension.load): a cache of
    compiled modules by configuration (`build(block_size)`), not of results.
    """
    if not _has_params(fn):
        return
    if any(
        isinstance(node, ast.Call) and _qualified_name(node.func, mod.aliases) in _CPP_BUILDERS
        for node in ast.walk(fn)
    ):
        return
    for decorator in fn.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if _qualified_name(target, mod.aliases) in _ARG_CACHES:
            yield _at(decorator, "global_state", "arg_cache", _code(target))


def _local_names(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Parameters and names assigned anywhere inside `fn`, minus those declared global."""
    a = fn.args
    names = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p}
    declared = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Global):
            declared.update(node.names)
    return names - declared


def _check_module_mutation(
    fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, mod: _Module
) -> Iterator[StaticViolation]:
    """Stores into module-level objects, and mutating calls on module-level containers."""
    local = _local_names(fn)
    for node in ast.walk(fn):
        if _is_store(node):
            # `_state.out = y` stores into any module-level object; `_cache.get(k)[0] = y`
            # into one reached through a call, counted only for containers.
            roots = [(_root(node), mod.bindings), (_root(node, through_calls=True), mod.containers)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr not in _MUTATORS:
                continue
            roots = [(_root(node.func.value, through_calls=True), mod.containers)]
        else:
            continue
        if any(
            isinstance(root, ast.Name) and root.id in shared and root.id not in local
            for root, shared in roots
        ):
            yield _at(node, "global_state", "module_state", _code(node))


def _moved_attributes(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[int]:
    """The targets of `self.w = self.w.to(...)` (or .cuda(), .contiguous()).

    One attribute re-bound to its own value on another device or in another layout: `self.w`,
    a submodule's `self.fc.weight`, or either's `.data` (the only form torch accepts for a
    parameter: `self.fc.weight.data = self.fc.weight.data.contiguous()`).
    """
    found = set()
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if not (
            isinstance(target, ast.Attribute)
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in _MOVES
        ):
            continue
        place, moved = _attribute_path(target), _attribute_path(value.func.value)
        if place is None or moved is None or len(place) < 2:
            continue
        if place == moved or (place[-1] == "data" and place[:-1] == moved):
            found.add(id(target))
    return found


def _attribute_path(node: ast.AST) -> tuple[str, ...] | None:
    """("self", "fc", "weight") for `self.fc.weight`; None for anything but a name's attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return (node.id, *reversed(parts))


def _stores_state(node: ast.AST, owners: set[str], state_names: frozenset[str]) -> bool:
    """Whether `node` is the target `self.<name>` of a plain store, <name> in `state_names`."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and node.attr in state_names
        and isinstance(node.value, ast.Name)
        and node.value.id in owners - {"type", "super"}
    )


def _stores_norm_statistics(node: ast.AST, owners: set[str]) -> bool:
    """Whether `node` is the target `self.<submodule>.running_mean` (or _var, batches tracked).

    What nn.BatchNorm's own forward does in training mode; the solution's own buffers may be
    rebound in forward too (`_registered_buffers`).
    """
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and node.attr in _NORM_STATISTICS
        and isinstance(node.value, ast.Attribute)
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id in owners - {"type", "super"}
    )


def _registered_buffers(cls: ast.ClassDef) -> frozenset[str]:
    """Names `__init__` registers as buffers: `self.register_buffer("name", ...)`."""
    names = set()
    for fn in cls.body:
        if not (isinstance(fn, _FUNCTIONS) and fn.name == "__init__" and fn.args.args):
            continue
        this = fn.args.args[0].arg
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register_buffer"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == this
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value)
    return frozenset(names)


def reference_state(task_source: str) -> frozenset[str]:
    """Attributes the task's `Model.forward` stores on self (a recurrent cell's hidden state)."""
    try:
        tree = ast.parse(task_source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    names = set()
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == "Model"):
            continue
        for fn in cls.body:
            if isinstance(fn, _FUNCTIONS) and fn.name == "forward" and fn.args.args:
                this = fn.args.args[0].arg
                for node in ast.walk(fn):
                    if _stores_state(node, {this}, frozenset({getattr(node, "attr", "")})):
                        names.add(node.attr)
    return frozenset(names)


def _check_forward(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, state_names: frozenset[str] = frozenset()
) -> Iterator[StaticViolation]:
    """Stores and mutating calls on self (or type(self), super()) inside forward.

    `self.<name> = ...` for a name of `state_names` is allowed (see check_solution_source).
    """
    params = [*fn.args.posonlyargs, *fn.args.args]
    owners = {"type", "super"}
    # A staticmethod forward (torch.autograd.Function) gets a per-call ctx, not self.
    if params and not any(_code(d) == "staticmethod" for d in fn.decorator_list):
        owners.add(params[0].arg)
    moved = _moved_attributes(fn)
    for node in ast.walk(fn):
        if id(node) in moved or _stores_state(node, owners, state_names):
            continue
        if _stores_norm_statistics(node, owners):
            continue
        if _is_store(node):
            owner = _root(node, through_calls=True)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = _root(node.func.value, through_calls=True)
            if node.func.attr not in _SELF_MUTATORS:
                continue
            starred = any(isinstance(a, ast.Starred) for a in node.args)
            if not starred and len(node.args) > _MUTATOR_ARITY.get(node.func.attr, len(node.args)):
                continue  # not that container method: a function of the same name
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            owner = _root(node.args[0], through_calls=True)
            if node.func.id not in ("setattr", "delattr"):
                continue
        else:
            continue
        if isinstance(owner, ast.Name) and owner.id in owners:
            yield _at(node, "global_state", "forward_state", _code(node))
