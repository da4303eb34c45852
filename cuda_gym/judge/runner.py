"""The untrusted runner: loads a solution's ModelNew and serves calls for the trusted driver.

Run only by `cuda_gym.judge.driver` (through `cuda_gym.judge.untrusted.launch_untrusted`) as
`python -I runner.py FD`, FD being its end of a Unix socket. It imports torch and the standard
library, never a module of `cuda_gym`: nothing of the judge (timer, reference, task, trial seeds,
comparison) exists in this process for candidate code to reach. It holds no trial input before
the call that uses it: the driver hands each call's inputs over with the call. Its replies are
JSON whose fields mirror `cuda_gym.judge.protocol` (RunnerReady, CallReply); the driver decodes
them strictly and trusts none of them: what the runner measures or reports can only reject.

Messages (driver -> runner): "null" CallRequests (empty calls, before anything is loaded: the
driver's measure of the round trip), RunnerInit, then "share" (CUDA: the driver's input and
output buffers as two file descriptors of CUDA virtual memory, once per layout; see
cuda_gym/judge/device_share.py), "prime" (CUDA: one tiny kernel, synchronised, before each timed
call), "call" / "profile" CallRequests, "exit". A "call" whose forward
returned is answered twice: "done" ({"call_id", "done": true, "nonce"}, the call's nonce) right
after forward and its synchronisation, then the CallReply once the outputs are in the driver's
slots.
"""

import array
import contextlib
import ctypes
import functools
import gc
import importlib.util
import json
import mmap
import os
import re
import socket
import sys
import tempfile
import threading
import time
import traceback
import types
import weakref

# The runner's clock, taken before any solution code runs: a solution that replaces
# time.perf_counter (its own process's: the driver times from outside) must not have its
# code run by the runner's wait for the next call (that would be work between calls).
_clock = time.perf_counter
# Likewise the functions the runner's checks of its own thread call (_MainThread): a solution
# reaches these modules (`torch.sys.modules["gc"]`) and could replace what they hold.
_gc_isenabled, _gc_disable, _gc_collect, _gc_get_count = (
    gc.isenabled,
    gc.disable,
    gc.collect,
    gc.get_count,
)
_gettrace, _settrace, _getprofile, _setprofile = (
    sys.gettrace,
    sys.settrace,
    sys.getprofile,
    sys.setprofile,
)
_weakrefs = weakref.getweakrefcount
MAX_MESSAGE_BYTES = 1 << 20
# The binder of kernel-only workspaces (copied beside kernels_ext; launch.py in older builds).
PLAIN_LAUNCHERS = ("kernels_launch.py", "launch.py")
TRITON_JIT = os.path.join("triton", "runtime", "jit.py")
MAX_FDS = 2
MAX_SPIN_S = 0.05  # the most a message's "spin_s" may ask for
ERROR_CHARS = 4000
# The build stage's precompiled torch headers, from the judge (cuda_gym.judge.pch):
# {"variants": {name: [with_cuda, extra_cflags]}, "dirs": {name: directory holding the .gch}}.
PCH_ENV = "CUDA_GYM_INLINE_PCH"


def _send(sock, message) -> None:
    data = json.dumps(message).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        data = json.dumps({**message, "error": "reply too large", "violations": []}).encode()
    sock.sendall(data)


def _receive(sock, spin_s: float = 0.0):
    """(message dict, fds) or (None, []) once the driver has gone.

    With `spin_s`, polls that long before blocking: a call that follows within it starts
    without the wake-up of a sleeping process (a tenth of a millisecond or more, inside the
    driver's timed window).
    """
    fds = array.array("i")
    room = socket.CMSG_LEN(MAX_FDS * fds.itemsize)
    got = None
    if spin_s > 0:
        deadline = _clock() + min(spin_s, MAX_SPIN_S)
        sock.setblocking(False)
        try:
            while got is None and _clock() < deadline:
                try:
                    got = sock.recvmsg(MAX_MESSAGE_BYTES, room)
                except BlockingIOError:
                    pass
        finally:
            sock.setblocking(True)
    data, ancdata, _, _ = got if got is not None else sock.recvmsg(MAX_MESSAGE_BYTES, room)
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    if not data:
        return None, []
    return json.loads(data), list(fds)


def _short_traceback(exc: BaseException, keep: int = 12) -> str:
    message = next((line for line in str(exc).splitlines() if line.strip()), "")
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    text = "".join(lines[-keep:])
    return f"{type(exc).__name__}: {message[:300]}\n{text[-ERROR_CHARS:]}"


_ABSENT = object()


def _copy_state(torch, model, state: dict, device: str) -> list:
    """Copy the reference's state into `model`; what each call then starts from.

    `state`: the reference's plain tensor attributes by dotted path (None: a name its forward
    stores that __init__ did not set, copied from nothing). Each is copied where
    `model` has the same attribute with the same shape and dtype (as the weights are: a
    recurrent cell's initial hidden state drawn at random in __init__ comes from the
    reference, whichever generator drew it), on `device` as in the reference (built on the
    device; `Module.to` leaves such attributes where they are). Returns [(module, name, value)]
    for every path of `state` (`Runner._fresh_state`): the copy, else the model's own value
    under that name, or _ABSENT. Forward may store exactly those names on self
    (static_checks.reference_state), and nothing so stored outlives the call. Attributes
    under other names are left alone: a constant forward moves to the device moves once.
    """
    modules = dict(model.named_modules())
    held = []
    for path, given in state.items():
        owner, _, name = path.rpartition(".")
        module = modules.get(owner)
        if module is None or name.startswith("_"):
            continue
        value = vars(module).get(name, _ABSENT)
        if value is _ABSENT:  # a buffer under that name is state as well
            value = getattr(module, "_buffers", {}).get(name, _ABSENT)
        if (
            isinstance(value, torch.Tensor)
            and isinstance(given, torch.Tensor)
            and (given.shape, given.dtype) == (value.shape, value.dtype)
        ):
            value = given.to(device)
            setattr(module, name, value)
        held.append((module, name, value))
    return held


def _import_file(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _enter_solution_folder(solution_dir: str) -> None:
    """Make the working directory a writable view of the solution's folder.

    Solutions name their files relative to their folder (`load(sources=["csrc/op.cpp"])`,
    `open("kernels/op.cu")`), as they were run from there; others write files where they run.
    The solution's folder is read-only here and the runner starts in its scratch directory, so
    it works in a new folder of the scratch that links every top-level entry of the solution's.
    """
    try:
        work = tempfile.mkdtemp(prefix="solution_", dir=os.getcwd())
        for entry in os.listdir(solution_dir):
            os.symlink(os.path.join(solution_dir, entry), os.path.join(work, entry))
        os.chdir(work)
    except OSError:  # names relative to the solution then fail as they would have before
        pass


def _pin_numerics(torch) -> None:
    # Full fp32, as the reference: no TF32 in cuBLAS or cuDNN.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def _converts_dtype(torch, name: str, args, kwargs: dict) -> bool:
    """A copy whose result has another dtype than its source: a conversion, which is compute.

    Also cuda_gym.judge.fallback's rule (this module imports nothing of the judge's).
    """
    if name in ("aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"):
        dst, src = (args[0], args[1]) if name == "aten::copy_" else (args[1], args[0])
        return (
            isinstance(src, torch.Tensor)
            and isinstance(dst, torch.Tensor)
            and src.dtype != dst.dtype
        )
    if name == "aten::_to_copy":
        dtype = kwargs.get("dtype")
        return dtype is not None and dtype != args[0].dtype
    return False


class _Escapes:
    """Stand-ins for torch's ways past the ban that reach no dispatcher, for the runner's life.

    `Tensor.numpy`, `tolist`, `__array__`, `map_`, `map2_`, `apply_` and `__dlpack__`, torch._C's
    dispatch-mode functions, the operator handle's redispatch, torch.save and torch.frombuffer
    (see `_Ban`). Installed once per process, before any code of the solution's runs; each
    passes through to torch's own unless a ban refuses it (`refuse`), which a ban does only
    while forward runs. So a reference the solution takes at import or in __init__
    (`host = torch.Tensor.numpy`, or C++ fetching torch._C's mode functions through pybind11
    as its extension loads) is a stand-in too: before, they were set only during forward, and a
    `Tensor.numpy` taken at import went past them (red-team round 21).
    """

    # (map_, map2_, apply_: PyTorch calls a Python function on every element, red-team round
    # 20; also refused by the static checks, which see the spellings that pass a stand-in.)
    TENSOR_METHODS = ("numpy", "tolist", "__array__", "map_", "map2_", "apply_", "__dlpack__")

    def __init__(self, torch, mode_escapes, mode_queries) -> None:
        import torch.serialization as serialization
        import torch.utils._python_dispatch as python_dispatch
        import torch.utils.dlpack as dlpack

        self.refusing: tuple[list, frozenset] | None = None  # (violations, keys) in forward
        self.tensor = torch.Tensor
        places = [(torch.Tensor, name) for name in self.TENSOR_METHODS]
        # torch._C's own, the copies torch.utils._python_dispatch imported (its _pop_mode), and
        # the operator handle's redispatch.
        places += [
            (torch._C, name)
            for name in dir(torch._C)
            if mode_escapes.search(name) and name not in mode_queries
        ]
        places += [
            (python_dispatch, name)
            for name in (
                "_pop_torch_dispatch_stack",
                "_push_on_torch_dispatch_stack",
                "_get_dispatch_stack_at",
            )
            if hasattr(python_dispatch, name)
        ]
        handle = getattr(torch._C, "_DispatchOperatorHandle", None)
        if handle is not None and hasattr(handle, "redispatch_boxed"):
            places.append((handle, "redispatch_boxed"))
        # Tensor bytes to a file and back with no operator (torch.save's raw storage, read by
        # NumPy; torch.frombuffer wraps the result): compute the ban would not see.
        places += [
            (place, name)
            for place, name in (
                (torch, "save"),
                (serialization, "save"),
                (torch, "frombuffer"),
                (torch, "from_file"),
                (torch.UntypedStorage, "_write_file"),
                (torch.UntypedStorage, "from_file"),
            )
            if hasattr(place, name)
        ]
        # A DLPack capsule NumPy reads through an object of one's own (refused on the CPU only).
        places += [(torch._C, n) for n in dir(torch._C) if n.startswith("_to_dlpack")]
        places += [(p, "to_dlpack") for p in (torch, dlpack) if hasattr(p, "to_dlpack")]
        self.installed = [  # (place, name, key, stand-in)
            self._install(place, name, self.key(place, name), getattr(place, name))
            for place, name in places
            if hasattr(place, name)
        ]

    @staticmethod
    def key(place, name: str) -> str:
        """`Tensor.numpy`, `torch._C._pop_torch_dispatch_stack`, ...: what a ban refuses."""
        return f"{getattr(place, '__name__', 'torch._C')}.{name}"

    def _install(self, place, name: str, key: str, original) -> tuple:
        """Put a stand-in for `original` at place.name; return its `installed` entry."""
        stand_in = self._stand_in(original, key, place is self.tensor)
        setattr(place, name, stand_in)
        return place, name, key, stand_in

    def _stand_in(self, original, key: str, method: bool):
        def stand_in(*args, **kwargs):
            refusing = self.refusing
            if refusing is None or key not in refusing[1]:
                return original(*args, **kwargs)
            violations = refusing[0]
            if len(violations) < 20:
                violations.append(
                    f"torch_fallback: {key} called inside ModelNew.forward (tensor data taken to"
                    " the host for NumPy or Python arithmetic)"
                    if method
                    else f"torch_fallback: {key} used inside ModelNew.forward (a way past the ban"
                    " on PyTorch ops)"
                )
            raise RuntimeError(f"{key} is not allowed inside ModelNew.forward")

        return stand_in

    def adopt(self) -> None:
        """Right before the solution loads: wrap what the runner itself put in their places.

        (The thread ban and `_MainThread` refuse some of them for the runner's life, installed
        after the first ban made these stand-ins.) From now on any replacement is the
        solution's.
        """
        for k, (place, name, key, stand_in) in enumerate(self.installed):
            current = getattr(place, name, None)
            if current is not stand_in:
                self.installed[k] = self._install(place, name, key, current)

    def replaced(self, violations: list, when: str) -> None:
        """Put back every stand-in the solution replaced, recording that it did."""
        for place, name, key, stand_in in self.installed:
            if getattr(place, name, None) is not stand_in:
                if len(violations) < 20:
                    violations.append(
                        f"torch_fallback: {key} was replaced {when} (a stand-in of the judge's)"
                    )
                setattr(place, name, stand_in)


_ESCAPES: _Escapes | None = None


class _Ban:
    """A dispatch mode refusing aten ops outside `allowed`, plus host escapes of tensor data.

    `Tensor.numpy`, `tolist`, `__array__`, `map_`, `map2_` and `apply_` do not reach the
    dispatcher: while forward runs their stand-ins (`_Escapes`) record a violation and raise
    (NumPy or Python arithmetic on the data is compute done by no kernel of the candidate's).
    On the CPU so do `__dlpack__` and `to_dlpack` (`numpy.from_dlpack`); on CUDA DLPack is how
    CuPy kernels take torch's tensors.
    """

    # The ways past the mode in torch's Python API (C++ reaches them through pybind11, by
    # names it can assemble at run time, which no source scan sees): every torch._C name that
    # pops, pushes, sets or guards dispatch modes and keys, and the operator handle's
    # redispatch. Refused while forward runs.
    MODE_ESCAPES = re.compile(
        r"(?i)dispatch\w*(guard|stack|mode)|dispatch_key_(excluded|included)|"
        r"disabletorchdispatch|pythondispatcher|disabled_torch_dispatch|dispatch_call_boxed|"
        r"predispatch"
    )
    # Read-only queries and the enum torch's own mode helpers use. Not the getters of the modes
    # themselves (_get_dispatch_stack_at, _get_dispatch_mode): from this mode object its
    # allowed set and its function are a few attribute reads away.
    MODE_QUERIES = frozenset(
        "_len_torch_dispatch_stack _TorchDispatchModeKey "
        "_dispatch_tls_is_dispatch_key_excluded _dispatch_tls_is_dispatch_key_included".split()
    )

    def __init__(self, torch, allowed: set, device: str = "cpu") -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        global _ESCAPES
        # Taken now, before the stand-ins and the solution: what checks that the mode is in
        # force (`_check_mode`) is nobody's to replace.
        self._stack_len = torch._C._len_torch_dispatch_stack
        self._stack_at = torch._C._get_dispatch_stack_at
        if _ESCAPES is None:
            _ESCAPES = _Escapes(torch, self.MODE_ESCAPES, self.MODE_QUERIES)
        self.escapes = _ESCAPES
        violations: list[str] = []
        self.violations = violations
        allowed = frozenset(allowed)  # nothing can be added to it from inside forward
        permitted = (
            "allocation, views and copies"
            if "aten::copy_" in allowed
            else "allocation and views: this task only moves data, so PyTorch's copies would"
            " be its whole computation"
        )

        class Mode(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                # Else torch wraps __torch_dispatch__ in torch._dynamo.disable, whose first
                # call imports torch._dynamo (seconds of CPU in every candidate's first call)
                # and whose wrapper runs around every op of every timed call.
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func._schema.name
                if types:
                    # A tensor subclass of the solution's with a __torch_dispatch__ of its
                    # own: called once the mode lets the op through, with the mode popped,
                    # whatever it runs would be judged by nobody (red-team round 19: a
                    # subclass handed to the allowed fill_ transposed with PyTorch's copy).
                    if len(violations) < 20:
                        violations.append(
                            f"torch_fallback: a tensor subclass with its own"
                            f" __torch_dispatch__ handed to {func} inside ModelNew.forward"
                        )
                    raise RuntimeError(
                        "tensor subclasses with __torch_dispatch__ are not allowed inside"
                        " ModelNew.forward"
                    )
                if name not in allowed or _converts_dtype(torch, name, args, kwargs or {}):
                    if len(violations) < 20:
                        violations.append(f"torch_fallback: {func} called inside ModelNew.forward")
                    raise RuntimeError(
                        f"PyTorch op {func} called inside ModelNew.forward: compute must be done"
                        f" by your own kernels (only {permitted} are allowed)"
                    )
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self._mode_dict = object.__getattribute__(self.mode, "__dict__")
        # On CUDA DLPack stays open (CuPy); everything else the stand-ins cover is refused.
        self.refused = frozenset(
            key
            for _, name, key, _ in self.escapes.installed
            if device == "cpu"
            or not (name == "__dlpack__" or name.lstrip("_").startswith("to_dlpack"))
        )

    @contextlib.contextmanager
    def active(self):
        escapes = self.escapes
        with self.mode:
            self._check_mode()
            # Refused once the mode is on its stack, passed through again before it comes off
            # (its exit pops it through torch's Python API). A stand-in replaced by the
            # solution is put back: outside forward before the call, and inside while the
            # mode still judges what forward put there (a stand-in of the solution's whose
            # destructor ran PyTorch's copy once the ban was lifted: red-team round 16).
            escapes.replaced(self.violations, "outside ModelNew.forward")
            escapes.refusing = (self.violations, self.refused)
            try:
                yield
            finally:
                escapes.refusing = None
                escapes.replaced(self.violations, "inside ModelNew.forward")

    def _check_mode(self) -> None:
        """Raise (recording a violation) unless this mode is on top of the stack, as written.

        Its method shadowed on the object (red-team round 29 passed every op through a
        `__torch_dispatch__` set on the mode object) or the mode kept off the stack: the ban
        would judge nothing.
        """
        depth = self._stack_len()
        mode_dict = object.__getattribute__(self.mode, "__dict__")
        if (
            depth > 0
            and self._stack_at(depth - 1) is self.mode
            and mode_dict is self._mode_dict
            and "__torch_dispatch__" not in mode_dict
        ):
            return
        if len(self.violations) < 20:
            self.violations.append(
                "torch_fallback: the op ban's dispatch mode was changed or kept off the stack"
                " (a way past the ban)"
            )
        raise RuntimeError("the op ban's dispatch mode was tampered with")


def _switch_refuser(violations: list, name: str, what: str = ""):
    """A stand-in for torch's `name` for the runner's life: records a violation and raises."""
    what = what or (
        f"torch's {name} called (RecordFunction switched off or skipped: a way past the ban on"
        " the solution's threads)"
    )

    def refused(*args, **kwargs):
        if len(violations) < 20:
            violations.append(f"torch_fallback: {what}")
        raise RuntimeError(f"{name} is not allowed in a solution")

    return refused


class _ThreadBan:
    """The fallback ban on the solution's other threads: the judge's library (thread_ban.cpp).

    Its RecordFunction callback records each op outside `allowed` (or a copy that changes the
    dtype) that a thread other than this one calls, from its installation on, and this
    thread's at the level `watch` sets: every op (ALL), the ops called inside another op
    (NESTED: forward, whose own calls the mode judges) or none (OFF). `opaque`: allowed ops
    whose insides pass (a vendor task's GEMMs). `take` reads and clears the record.
    """

    OFF, ALL, NESTED = 0, 1, 2

    # The ways past RecordFunction in torch's Python API, which C++ reaches through pybind11 by
    # names built at run time: its switches (one thread of the solution's switching it off for
    # itself ran unseen: red-team round 15) and the operator handle's redispatch, which skips
    # it. Refused for the runner's whole life: a thread may keep what it took before a call.
    SWITCHES = ("_enable_record_function", "_clear_callbacks", "_set_empty_test_observer")

    def __init__(self, path: str, allowed: list, opaque: list, torch) -> None:
        import torch.autograd as autograd

        self.violations: list = []
        places = [(place, n) for place in (torch._C._autograd, autograd) for n in self.SWITCHES]
        places.append((torch._C._DispatchOperatorHandle, "redispatch_boxed"))
        for place, name in places:
            if hasattr(place, name):
                setattr(place, name, _switch_refuser(self.violations, name))
        self.lib = ctypes.CDLL(path)
        self.lib.cuda_gym_thread_ban_install.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        self.lib.cuda_gym_thread_ban_take.argtypes = [ctypes.c_char_p, ctypes.c_long]
        self.lib.cuda_gym_thread_ban_take.restype = ctypes.c_long
        self.lib.cuda_gym_thread_ban_watch_serving.argtypes = [ctypes.c_int]
        self.lib.cuda_gym_thread_ban_allow_copy.argtypes = [ctypes.c_void_p]
        self.buffer = ctypes.create_string_buffer(4096)
        names, opaque = ("\n".join(sorted(ops)).encode() for ops in (allowed, opaque))
        if self.lib.cuda_gym_thread_ban_install(names, opaque) != 0:
            raise RuntimeError(f"the thread ban of {path} was installed already")

    def allow_copy(self, address) -> None:
        """Pass this thread's next `aten::copy_` into the tensor whose data is at `address`."""
        self.lib.cuda_gym_thread_ban_allow_copy(address)

    def watch(self, level: int) -> None:
        """Judge this (the serving) thread's ops at `level` (OFF, ALL, NESTED) from now on."""
        self.lib.cuda_gym_thread_ban_watch_serving(level)

    def take(self) -> list:
        found, self.violations[:] = list(self.violations), []
        count = self.lib.cuda_gym_thread_ban_take(self.buffer, len(self.buffer))
        if count < 0:
            return found + [
                "torch_fallback: the judge's RecordFunction callback was removed (the ban on"
                " the solution's threads switched off)"
            ]
        if not count:
            return found
        names = set(self.buffer.value.decode().split())
        inside = sorted(n[1:] for n in names if n.startswith(">"))
        if inside:  # (the count is of both kinds)
            found.append(
                f"torch_fallback: PyTorch ops run inside an op ModelNew.forward called"
                f" ({', '.join(inside)}): an allowed op made to run other code is still"
                " PyTorch doing the work"
            )
        if names.difference(">" + n for n in inside):
            others = ", ".join(sorted(n for n in names if not n.startswith(">")))
            found.append(
                f"torch_fallback: PyTorch ops called past the ban's dispatch mode, on a thread"
                f" of the solution's or on forward's with the mode popped ({count} calls:"
                f" {others}); only the ops forward may call are allowed anywhere, and the"
                " solution's own kernels must do the work"
            )
        return found


# Files that are a process's (or the machine's) memory: /proc/<pid>/mem and its kin.
_PROCESS_MEMORY = re.compile(
    r"^/proc/[^/]+(?:/task/[^/]+)?/(?:mem|pagemap|map_files(?:/.*)?)$|^/dev/k?mem$|^/proc/kcore$"
)


def _process_memory(path) -> bool:
    """Whether `path` (as open() takes it: a path or a file descriptor) is process memory."""
    try:
        if isinstance(path, int):
            path = f"/proc/self/fd/{path}"
        path = os.fsdecode(path)
        return bool(_PROCESS_MEMORY.match(os.path.realpath(path)))
    except (TypeError, ValueError, OSError):
        return False


class _Origin:
    """Whether code of the solution's raised an audited event (for _MainThread's audit hook).

    The event's origin is the innermost frame outside Python's standard library (and its
    frozen import machinery): a file of the solution's, or code with no file ("<string>": what
    exec ran) is the solution's; torch's, Triton's or the runner's own files are not. So
    `os.popen` called by model_new.py is refused although subprocess.py starts the process.

    Code compiled from a string is refused where the innermost frame is the solution's. Where
    the standard library compiles on the solution's behalf (a dataclass's methods, a
    namedtuple's, a string annotation's ForwardRef) the source is read instead, and refused when
    it names what no generated method needs (SUSPECT_NAMES, an import): round 27 put code in a
    dataclass field's name, which dataclasses pasted into the source it runs.
    """

    SUSPECT_NAMES = frozenset(
        "__import__ exec eval compile getattr setattr delattr globals locals vars breakpoint "
        "__builtins__ __globals__ __dict__ __subclasses__ __code__ __closure__ "
        "__mro__ __bases__ __base__ mro f_back f_globals f_locals _getframe gi_frame tb_frame "
        "os sys gc ctypes _ctypes subprocess importlib builtins np numpy inspect marshal mmap "
        "runpy system popen tolist __array_interface__ __dlpack__".split()
    )
    COMPILING = frozenset({"compile", "exec"})
    # The frames a traceback, generator or coroutine holds (audited as "object.__getattr__").
    FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
    # Refused only where the solution's own code (or C++ it called) raised them: the standard
    # library looks its callers' frames up for warnings, logging and typing, and reads functions'
    # code for inspect and dataclasses. (A function's __globals__ is another module's
    # namespace: round 30 reached the runner's through its ban's method; audited from 3.12.)
    DIRECT = frozenset({"sys._getframe", "sys._getframemodulename"})
    CODE_ATTRS = frozenset(
        {"__code__", "__globals__", "__closure__", "__defaults__", "__kwdefaults__"}
    )
    WATCHED_ATTRS = FRAME_ATTRS | CODE_ATTRS

    def __init__(self, solution_dir: str) -> None:
        import site
        import sysconfig

        self.solution = os.path.join(os.path.realpath(solution_dir), "")
        # The interpreter's own library (a venv's platstdlib holds its site-packages: torch's
        # and Triton's frames are origins of their own, whose compilers start processes).
        self.stdlib = os.path.join(os.path.realpath(sysconfig.get_paths()["stdlib"]), "")
        self.packages = tuple(os.path.join(os.path.realpath(p), "") for p in site.getsitepackages())
        self.reading = False  # (ast.parse compiles too: no judgement of our own parse)
        self._untrusted_files: dict[str, bool] = {}
        self._stdlib_files: dict[str, bool] = {}

    def _file(self, frame) -> str:
        return frame.f_code.co_filename

    def _untrusted(self, name: str) -> bool:
        """A file of the solution's, code with no file, or a file that is not there."""
        if name.startswith("<"):
            return not name.startswith("<frozen ")
        known = self._untrusted_files.get(name)
        if known is None:  # (a frame lookup is frequent: each file is looked at once)
            path = os.path.realpath(name)
            known = path.startswith(self.solution) or not os.path.isfile(path)
            self._untrusted_files[name] = known
        return known

    def _in_stdlib(self, name: str) -> bool:
        if name.startswith("<frozen "):
            return True
        known = self._stdlib_files.get(name)
        if known is None:
            path = os.path.realpath(name)
            known = path.startswith(self.stdlib) and not path.startswith(self.packages)
            self._stdlib_files[name] = known
        return known

    def _origin(self, frame):
        """The innermost frame outside the standard library (None: none)."""
        while frame is not None and self._in_stdlib(self._file(frame)):
            frame = frame.f_back
        return frame

    def _imported(self, event: str, args: tuple, caller) -> bool:
        """An import's own step: a module file's source compiled, its code run, its .pyc read."""
        if not self._file(caller).startswith("<frozen importlib"):
            return False
        if event == "marshal.loads":
            return True
        if event == "compile" and len(args) >= 2 and isinstance(args[1], str):
            path = os.path.realpath(args[1])
            if path.startswith(self.solution) or not os.path.isfile(path):
                return False
            with open(path, "rb") as f:
                text = f.read()
            source = args[0].encode() if isinstance(args[0], str) else args[0]
            return source == text
        if event == "exec" and args and isinstance(args[0], types.CodeType):
            return not self._untrusted(args[0].co_filename)
        return False

    def refused(self, event: str, args: tuple, caller) -> str:
        """Where the solution raised `event` ("model_new.py line 7"), or "" if it did not.

        (An import is no exception by itself: a solution's extension runs its module init
        under importlib's frames, round 28 compiled and ran hidden source from there.)
        """
        if self.reading:
            return ""  # (our own parse)
        attribute = None
        if event == "object.__getattr__":  # (raised for every function's __code__ read)
            attribute = args[1] if len(args) >= 2 else None
            if attribute not in self.WATCHED_ATTRS:
                return ""
        if self._untrusted(self._file(caller)):
            return self._where(caller)
        if event in self.DIRECT or attribute in self.CODE_ATTRS:
            return ""  # (the standard library's own lookups: warnings, logging, inspect)
        origin = self._origin(caller)
        if origin is None or not self._untrusted(self._file(origin)):
            return ""
        if self._imported(event, args, caller):
            return ""
        if event not in self.COMPILING or self._file(caller).startswith("<frozen "):
            return self._where(origin)
        # The standard library compiling for the solution: generated source, read for what
        # generated methods never name.
        if event == "compile":
            source = args[0] if args else None
            if isinstance(source, (str, bytes)) and self._suspect_source(source):
                return self._where(origin)
            return ""
        code = args[0] if args else None
        if isinstance(code, types.CodeType) and self._untrusted(code.co_filename):
            if self._suspect_code(code):
                return self._where(origin)
        return ""

    def _where(self, frame) -> str:
        name = self._file(frame)
        return (
            f"the solution's {os.path.basename(name) if name[:1] != '<' else name} line"
            f" {frame.f_lineno}"
        )

    def _suspect_source(self, source) -> bool:
        import ast

        self.reading = True
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return True
        finally:
            self.reading = False
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                return True
            name = getattr(node, "id", None) or getattr(node, "attr", None)
            if name in self.SUSPECT_NAMES:
                return True
        return False

    def _suspect_code(self, code) -> bool:
        if set(code.co_names) & self.SUSPECT_NAMES:
            return True
        return any(isinstance(c, types.CodeType) and self._suspect_code(c) for c in code.co_consts)


class _MainThread:
    """What keeps code of the solution's off the runner's thread outside forward's ban.

    Forward runs under the ban; the runner's own steps around it (placing the inputs, handing
    the outputs over, waiting for the next call) run no code of the solution's, except through
    Python's hooks: a finalizer run by the cyclic garbage collector (any allocation can start
    it), or when the runner drops what forward returned or touched (an object forward hung on
    an output or an input: a tensor's attribute, a weak reference's callback), a signal
    handler, a profile or trace function, an audit hook. Such code could call PyTorch with no
    ban on (a transpose task's copy, done while the outputs are handed over: red-team round
    16's residual; or before forward, on the input's `mmap`: round 17). So, for a banned
    runner's life: the collector is off (collections are run under the ban, when due); what
    forward saw is dropped under the ban when it carries anything of the solution's; Python
    signal handlers and audit hooks may not be set; a profile or trace function forward leaves
    on this thread is a violation (and removed). The thread ban's library judges this thread's
    ops everywhere, forward's included (Runner._guard).
    """

    # Collect under the ban once this many allocations have piled up (CPython's own default
    # threshold for its youngest generation); older generations as CPython would.
    YOUNG = 700

    def __init__(self, violations: list, installed: tuple) -> None:
        import signal

        self.torch = None  # set by refuse_kernel_overrides
        self.violations = violations
        self.installed = installed  # the directories of Python's and torch's own code
        self.getsignal = signal.getsignal  # (taken before the solution can replace it)
        self.handlers = {n: signal.getsignal(n) for n in signal.valid_signals()}
        self.thresholds = gc.get_threshold()

    # Events the solution may not raise, whatever name reached the function (the static rules
    # refuse exec, os.system, ctypes by name; red-team round 26 reached exec through a
    # ForwardRef and from C++ through PyEval_GetBuiltins, os through `[torch][0].os`; round 27
    # ran code in a dataclass field's name, from dataclasses' own exec). See _Origin.
    FROM_SOLUTION = frozenset(
        {
            "compile",
            "exec",
            "code.__new__",
            "marshal.loads",
            "os.system",
            "os.exec",
            "os.posix_spawn",
            "os.spawn",
            "os.fork",
            "os.forkpty",
            "os.kill",
            "os.killpg",
            "subprocess.Popen",
            "ctypes.dlopen",
            "ctypes.dlsym",
            "ctypes.cdata",
            "ctypes.addressof",
            # The runner's own objects found by walking the heap or the stack (red-team round
            # 29: C++ imported the already-imported gc through the builtins, found the Runner
            # by gc.get_objects and switched its ban off).
            "gc.get_objects",
            "gc.get_referrers",
            "gc.get_referents",
            "sys._getframe",
            "sys._getframemodulename",
            "sys._current_frames",
            "object.__getattr__",
        }
    )

    def refuse_audit_hooks(self, solution_dir: str = "") -> None:
        """Before the solution is loaded: no audit hook can be added from now on.

        An audit hook runs on whichever thread raises an audited event: on this one at the
        runner's own steps (`mmap`, `os.listdir`, every ctypes call), outside the ban (red-team
        round 17: a hook on the input's `mmap` had PyTorch transpose it before forward). Hooks
        cannot be removed; a hook raising RuntimeError on "sys.addaudithook" refuses every
        later one, from Python, ctypes or C alike.

        The same hook refuses FROM_SOLUTION's events that code of the solution's raises
        (`_Origin`): code compiled from a string, a process started or signalled, memory by
        address, frames.
        """
        origin = _Origin(solution_dir) if solution_dir else None
        judging = threading.local()  # (the hook's own frame lookup raises an event too)

        def audit(event, args):
            if event == "sys.addaudithook":
                self._violation("an audit hook added")
                raise RuntimeError("audit hooks are not allowed in a solution")
            if origin is not None and event in self.FROM_SOLUTION:
                if getattr(judging, "on", False):
                    return
                judging.on = True
                try:
                    where = origin.refused(event, args, sys._getframe(1))
                finally:
                    judging.on = False
                if where:
                    if len(self.violations) < 20:
                        self.violations.append(
                            f"torch_fallback: `{event}` raised by {where} (code run from a"
                            " string, a process, memory by address or frames): only the"
                            " solution's own kernels may do the work"
                        )
                    raise RuntimeError(f"{event} is not allowed in a solution")
            if event == "open" and args and _process_memory(args[0]):
                # Any tensor's bytes read by address from Python, and written back (red-team
                # round 21, reward 2 under the external rules, where open() may read files).
                if len(self.violations) < 20:
                    self.violations.append(
                        "torch_fallback: the process's memory opened as a file"
                        f" ({str(args[0])[:60]}): tensor data taken to the host past the ban"
                    )
                raise PermissionError("a process's memory may not be opened in a solution")

        sys.addaudithook(audit)

    # The dispatcher's registration methods of torch.library's Library objects (and of any
    # object torch made at import, like its meta registrations' library).
    IMPLS = ("impl", "impl_t_t", "impl_with_aoti_compile")
    # The Python dispatcher: on, it runs the Python kernels `OpOverload.py_impl` registers (for
    # the CPU key too) below the ban (red-team round 19, switched on at import: reward 1).
    PYTHON_DISPATCHER = ("_EnablePythonDispatcher", "_DisablePythonDispatcher")
    # Their parameters naming the op, then the dispatch key (pybind11's names).
    IMPL_PARAMETERS = {
        "impl": ("name", "dispatch"),
        "impl_t_t": ("name", "dispatch"),
        "impl_with_aoti_compile": ("ns", "op_name_with_overload", "dispatch"),
    }
    FALLBACKS = ("fallback", "fallback_fallthrough")

    def refuse_kernel_overrides(self, torch) -> None:
        """Before the solution is loaded: no kernel of its own for an op that exists already.

        A Python kernel registered for an allowed op (`aten::fill_` on the CPU, through
        `torch.library.Library("aten", "IMPL").impl`) runs below the dispatch mode, which judges
        the op by its name, so whatever it calls is judged by nobody (red-team round 18: fill_
        made to transpose, reward 1). So are fallbacks, which run for every op at a dispatch
        key. The solution's own ops (a new namespace) stay allowed, and so do Meta kernels
        (torch registers some lazily; they never run on real tensors).
        """
        existing = set(torch._C._dispatch_get_all_op_names())
        existing |= {name.split(".", 1)[0] for name in existing}
        self.torch = torch
        self.dispatch_queries = (  # (taken before the solution can replace them)
            torch._C._len_torch_dispatch_stack,
            torch._C._dispatch_tls_is_dispatch_key_included,
            torch._C.DispatchKey.PythonDispatcher,
        )
        self.function_stack = (
            torch._C._len_torch_function_stack,
            torch._C._pop_torch_function_stack,
        )
        for name in self.PYTHON_DISPATCHER:
            if hasattr(torch._C, name):
                setattr(torch._C, name, self._skipper(f"the Python dispatcher (torch._C.{name})"))
        module = torch._C._DispatchModule
        for name in self.IMPLS:
            if hasattr(module, name):
                setattr(module, name, self._impl_refuser(getattr(module, name), existing, name))
        for name in self.FALLBACKS:
            if hasattr(module, name):
                what = f"a dispatcher fallback (torch.library {name})"
                setattr(module, name, self._skipper(what))

    # Refused calls here are skipped, not raised: the solution loads (its import would otherwise
    # fail before any call could report the violation), and nothing of the dispatcher changes.
    def _skipper(self, what: str):
        def skipped(*args, **kwargs):
            self._violation(f"{what} used")

        return skipped

    def _impl_refuser(self, impl, existing: set, method: str):
        def refused():
            self._violation(
                "a kernel registered for one of PyTorch's ops (torch.library impl: it runs"
                " below the ban, which judges the op by its name)"
            )

        params = self.IMPL_PARAMETERS[method]

        def guarded(library, *args, **kwargs):
            # By the binding's own parameter names, positional or not; a name that is not
            # exactly a str (bytes, an object of the solution's) is refused with the rest.
            values = list(args[: len(params)])
            values += [kwargs.get(p) for p in params[len(values) :]]
            *names, dispatch = values
            if any(type(n) is not str for n in names):
                return refused()
            op = "::".join(names)
            key = getattr(dispatch, "name", dispatch)  # a DispatchKey or its name
            qualified = op if "::" in op else f"aten::{op}"
            if key != "Meta" and (qualified in existing or qualified.split(".", 1)[0] in existing):
                return refused()
            return impl(library, *args, **kwargs)

        return guarded

    def take_over(self) -> None:
        """After the solution is loaded: collector off, signal handlers refused from now on."""
        import signal

        _gc_disable()
        changed = [
            str(n)
            for n, was in self.handlers.items()
            if self.getsignal(n) is not was and self._solutions(self.getsignal(n))
        ]
        if changed:
            self._violation(f"signal handlers set by the solution (signals {', '.join(changed)})")
        self.check_dispatch(modes=0)
        for module in (signal, sys.modules.get("_signal")):
            if module is not None and hasattr(module, "signal"):
                module.signal = self._handler_refuser(module.signal)

    def _solutions(self, handler) -> bool:
        """Whether a signal handler is code of the solution's (not Python's or torch's)."""
        if not callable(handler):
            return False  # SIG_DFL, SIG_IGN
        path = getattr(getattr(handler, "__code__", None), "co_filename", None)
        return not (isinstance(path, str) and os.path.realpath(path).startswith(self.installed))

    def _handler_refuser(self, set_handler):
        refused = _switch_refuser(
            self.violations,
            "signal.signal",
            "signal.signal called with a handler (Python run on the runner's thread at any"
            " moment, outside the ban)",
        )

        def guarded(signalnum, handler):
            if callable(handler):
                return refused()
            return set_handler(signalnum, handler)

        return guarded

    def check(self, profile=None) -> None:
        """Under the ban, after forward and after a drop: the collector and hooks as left.

        `profile`: the runner's own profile function, on while forward's own calls are counted.
        """
        if _gc_isenabled():
            _gc_disable()
            self._violation("Python's garbage collector switched on")
        if _gettrace() is not None:
            _settrace(None)
            self._violation("a trace function set on the runner's thread")
        if _getprofile() is not profile:
            _setprofile(profile)
            self._violation("a profile function set on the runner's thread")
        self.check_dispatch(modes=1)

    def check_dispatch(self, modes: int) -> None:
        """The dispatcher's state on this thread as the runner left it.

        `modes` dispatch modes (the ban's, under it) and no Python dispatcher (red-team round
        19: a mode of the solution's left on the stack at import, the dispatcher switched on).
        """
        if self.torch is None:
            return
        stack_depth, included, key = self.dispatch_queries
        if stack_depth() != modes:
            self._violation("a dispatch mode of the solution's left on the runner's thread")
        if included(key):
            self._violation("the Python dispatcher switched on")
        # A torch function mode left on: every op of the runner's own steps (handing the
        # outputs over) would run its Python (red-team round 32: a transpose done in the
        # runner's copy into the driver's slot, Python counted as the runner's). Taken off.
        functions, pop = self.function_stack
        if functions():
            while functions():
                pop()
            self._violation("a torch function mode of the solution's left on the runner's thread")

    def collection_due(self) -> bool:
        return _gc_get_count()[0] >= self.YOUNG

    def collect(self) -> None:
        """One collection, of the generations CPython would collect now (under the ban)."""
        counts = _gc_get_count()
        generation = 0
        if counts[1] >= self.thresholds[1]:
            generation = 2 if counts[2] >= self.thresholds[2] else 1
        _gc_collect(generation)

    @staticmethod
    def carries_extras(torch, values) -> bool:
        """Whether dropping `values` could run code of the solution's (see the class).

        `values` holds tensors, plain values and lists or tuples of them; anything else (a
        subclass, an object of the solution's, deeper nesting) carries extras. Microseconds:
        it runs after every call, in the finish the judge charges beyond its baselines'.
        """
        tensor, plain, count = torch.Tensor, (bool, int, float, str), _weakrefs
        for v in values:
            kind = type(v)
            items = v if kind is list or kind is tuple else (v,)
            for w in items:
                kind = type(w)
                if kind is tensor:
                    if count(w) or vars(w):
                        return True
                elif not (w is None or kind in plain):
                    return True
        return False

    @staticmethod
    def strip(torch, values) -> None:
        """Empty the attribute dictionaries of the tensors in `values` (under the ban)."""
        for v in values:
            for w in v if type(v) in (list, tuple) else (v,):
                if type(w) is torch.Tensor and vars(w):
                    vars(w).clear()

    def _violation(self, what: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(
                f"torch_fallback: {what}: a way to run the solution's code on the runner's"
                " thread outside the ban"
            )


class _OwnCalls:
    """Counts calls into compiled extensions that are not part of torch (the candidate's own).

    A profile hook on C calls made from Python during forward: a pybind11 function of a module
    loaded from a shared object outside Python's and torch's directories is the candidate's, and
    so is an entry point of a kernel-only workspace (its ctypes binder's `Entry.__call__`), and
    a launch of a Triton kernel defined outside those directories (`JITFunction.run`; Triton
    launches through its own installed library, which no path would name as the candidate's).
    """

    def __init__(self, torch) -> None:
        # Python's own extension modules (lib-dynload, site-packages: math, _ctypes, torch) are
        # not the solution's; its extensions are built into the judge's caches.
        roots = {torch.__file__, sys.prefix, sys.base_prefix, sys.exec_prefix}
        self.not_own = tuple(
            os.path.join(os.path.realpath(os.path.dirname(r) if r.endswith(".py") else r), "")
            for r in roots
        )
        self.count = 0
        self._known: dict[int, bool] = {}
        self.hook = self._hook  # one bound method, so that the runner can tell it by identity

    def _own(self, fn) -> bool:
        key = id(fn)
        if key not in self._known:
            self._known[key] = self._is_own(fn)
        return self._known[key]

    def _is_own(self, fn) -> bool:
        owner = getattr(fn, "__self__", None)
        if type(owner).__name__.startswith("pybind11_"):
            # A pybind11 function (its __self__ is a record) names its module: torch's name a
            # package of torch ("torch._C._dynamo.guards"), load_inline's a module of its own
            # that is not even in sys.modules.
            name = getattr(fn, "__module__", None) or ""
            parts = name.split(".")
            for k in range(len(parts), 0, -1):
                path = getattr(sys.modules.get(".".join(parts[:k])), "__file__", None)
                if isinstance(path, str):
                    return not os.path.realpath(path).startswith(self.not_own)
            return True
        path = getattr(owner, "__file__", None) if type(owner).__name__ == "module" else None
        return bool(
            isinstance(path, str)
            and path.endswith(".so")
            and not os.path.realpath(path).startswith(self.not_own)
        )

    def _hook(self, frame, event, arg) -> None:
        if event == "c_call" and self._own(arg):
            self.count += 1
        elif event != "call":
            return
        elif frame.f_code.co_name == "__call__" and (
            os.path.basename(frame.f_code.co_filename) in PLAIN_LAUNCHERS
        ):
            # A kernel-only workspace's extern "C" entry point (called through ctypes).
            self.count += 1
        elif (
            frame.f_code.co_name == "run"
            and frame.f_code.co_filename.endswith(TRITON_JIT)
            and self._installed(frame.f_code.co_filename)  # Triton's, not a file named so
        ):
            code = getattr(getattr(frame.f_locals.get("self"), "fn", None), "__code__", None)
            if code is not None and not self._installed(code.co_filename):
                self.count += 1

    def _installed(self, path: str) -> bool:
        return os.path.realpath(path).startswith(self.not_own)

    @contextlib.contextmanager
    def active(self):
        _setprofile(self.hook)
        try:
            yield
        finally:
            _setprofile(None)


def _spin_s(message: dict) -> float:
    """How long to poll for the message after `message` (its "spin_s"; 0 if none)."""
    value = message.get("spin_s")
    return float(value) if type(value) in (int, float) and value > 0 else 0.0


def _outputs_of(out) -> list:
    """The outputs of forward: the items a tuple or list holds, else [out].

    Read with tuple's and list's own accessors, so a subclass runs none of its code (its
    __iter__ could run the solution's kernels after the clock stopped, or outside the ban);
    a namedtuple or torch.return_types result gives its items as a plain tuple would.
    """
    kind = type(out)
    if issubclass(kind, tuple):
        return [tuple.__getitem__(out, i) for i in range(tuple.__len__(out))]
    if issubclass(kind, list):
        return [list.__getitem__(out, i) for i in range(list.__len__(out))]
    return [out]


# (taken when the runner is imported, before any code of the solution's: what it calls cannot
# be replaced through the ctypes module)
_MEMMOVE = ctypes.memmove


def _dense_plain(torch, t) -> bool:
    """Whether tensor `t`'s values are its memory's bytes in row-major order (no lazy bits)."""
    return (
        t.layout == torch.strided
        and t.is_contiguous()
        and not t.is_conj()
        and not t.is_neg()
        and not t.is_quantized
    )


def _plain(value) -> bool:
    return value is None or type(value) in (bool, int, float)


def _thread_ids() -> set:
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


class _GpuWaits:
    """CUDA: how this process waits for the GPU: asleep between timed calls, spinning in them.

    A synchronize in the default mode spins a core for the whole wait; with the judges of a
    GPU sharing it, a correctness call's wait is mostly other processes' work, seconds of host
    CPU per judgement (benchmarks/results/process_cpu_h100.json). Outside timed calls the
    current context waits blocking (it sleeps until the GPU signals: CPU-free, some
    microseconds later); "prime", which precedes each timed call, makes it spin again, so a
    timed call's wait ends as soon as the GPU is done, as it always did. `cuCtxSetFlags`
    (CUDA >= 12.1); where it is missing, or refuses, every wait spins as before.
    """

    SCHED_MASK = 0x7  # CU_CTX_SCHED_*
    SPIN = 0x1
    BLOCKING_SYNC = 0x4

    def __init__(self) -> None:
        self._cuda = None
        self.mode = None  # the flags last set (None: the context's own)
        self.unavailable = False

    def spin(self) -> None:
        self._set(self.SPIN)

    def sleep(self) -> None:
        self._set(self.BLOCKING_SYNC)

    def _set(self, sched: int) -> None:
        if self.unavailable or self.mode == sched:
            return
        if self._cuda is None:
            try:
                self._cuda = ctypes.CDLL("libcuda.so.1")
                self._cuda.cuCtxSetFlags.argtypes = [ctypes.c_uint]
                self._cuda.cuCtxGetFlags.argtypes = [ctypes.POINTER(ctypes.c_uint)]
            except (OSError, AttributeError):
                self.unavailable = True
                return
        flags = ctypes.c_uint(0)
        if self._cuda.cuCtxGetFlags(ctypes.byref(flags)) != 0:
            return  # no current context yet: the next call tries again
        if self._cuda.cuCtxSetFlags((flags.value & ~self.SCHED_MASK) | sched) != 0:
            # Refused: waits stay as they are, and no later call makes them blocking (a
            # context left blocking could not be made to spin for the timed calls).
            self.unavailable = True
            if self.mode == self.BLOCKING_SYNC:
                self._cuda.cuCtxSetFlags((flags.value & ~self.SCHED_MASK) | self.SPIN)
            return
        self.mode = sched


class _ImportedBuffer:
    """A GPU buffer of the driver's, imported from its file descriptor and mapped here.

    The importing half of cuda_gym/judge/device_share.py (this module imports no judge module):
    `cuMemImportFromShareableHandle` on the descriptor, then reserve, map and enable access.
    """

    def __init__(self, torch, fd: int, nbytes: int, alloc_bytes: int) -> None:
        torch.empty(1, device="cuda")  # the primary context is current in this thread
        self.cuda = cuda = ctypes.CDLL("libcuda.so.1")
        u64 = ctypes.c_uint64
        cuda.cuMemImportFromShareableHandle.argtypes = [
            ctypes.POINTER(u64),
            ctypes.c_void_p,
            ctypes.c_int,
        ]
        size_t = ctypes.c_size_t
        cuda.cuMemAddressReserve.argtypes = [ctypes.POINTER(u64), size_t, size_t, u64, u64]
        cuda.cuMemMap.argtypes = [u64, ctypes.c_size_t, ctypes.c_size_t, u64, u64]
        cuda.cuMemSetAccess.argtypes = [u64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
        cuda.cuMemUnmap.argtypes = [u64, ctypes.c_size_t]
        cuda.cuMemAddressFree.argtypes = [u64, ctypes.c_size_t]
        cuda.cuMemRelease.argtypes = [u64]
        self.handle = u64(0)
        self.ptr = u64(0)
        self.size = alloc_bytes  # the whole allocation, a multiple of its granularity
        try:
            self._check(
                cuda.cuMemImportFromShareableHandle(ctypes.byref(self.handle), fd, 1),
                "cuMemImportFromShareableHandle",
            )
        finally:
            os.close(fd)
        device = torch.cuda.current_device()
        # CUmemLocation {type DEVICE = 1, id}; CUmemAccessDesc {location, flags READWRITE = 3}.
        access = (ctypes.c_int * 3)(1, device, 3)
        self._check(
            cuda.cuMemAddressReserve(ctypes.byref(self.ptr), self.size, 0, 0, 0),
            "cuMemAddressReserve",
        )
        self._check(cuda.cuMemMap(self.ptr.value, self.size, 0, self.handle.value, 0), "cuMemMap")
        self._check(
            cuda.cuMemSetAccess(self.ptr.value, self.size, ctypes.byref(access), 1),
            "cuMemSetAccess",
        )
        view = types.SimpleNamespace(
            __cuda_array_interface__={
                "shape": (max(1, nbytes),),
                "typestr": "|u1",
                "data": (self.ptr.value, False),
                "version": 3,
                "strides": None,
                "stream": None,
            }
        )
        self.tensor = torch.as_tensor(view, device="cuda")

    @staticmethod
    def _check(result: int, what: str) -> None:
        if result != 0:
            why = " (out of memory)" if result == 2 else ""  # CUDA_ERROR_OUT_OF_MEMORY
            raise RuntimeError(f"{what} failed with CUDA driver error {result}{why}")

    def close(self, torch) -> None:
        self.tensor = None
        torch.cuda.synchronize()
        if self.ptr.value:
            self.cuda.cuMemUnmap(self.ptr.value, self.size)
            self.cuda.cuMemAddressFree(self.ptr.value, self.size)
        if self.handle.value:
            self.cuda.cuMemRelease(self.handle.value)


# CPython's flag for a type whose attributes cannot be set or deleted (built-in types have it).
_IMMUTABLE_TYPE = 1 << 8


def _runner_types() -> list[type]:
    """The classes this module defines."""
    return [
        value
        for value in list(globals().values())
        if isinstance(value, type) and value.__module__ == __name__
    ]


def _freeze_types(classes: list[type]) -> None:
    """Make the runner's classes immutable, as built-in types are, before the solution loads.

    A class's methods are what its objects do: red-team round 30 reached the Runner and the ban
    by `__subclasses__` of a public torch class and replaced `Runner._violations` and
    `_Ban.active` (class attributes, whose assignment raises no audit event), so nothing the
    runner saw was reported. With the flag set, assigning or deleting any attribute of these
    classes raises TypeError, whoever asks. The flag is found in the type object by its value
    (`type.__flags__`): nothing is changed where it cannot be found.
    """
    for cls in classes:
        flags = cls.__flags__
        for offset in range(0, 64 * ctypes.sizeof(ctypes.c_void_p), ctypes.sizeof(ctypes.c_ulong)):
            field = ctypes.c_ulong.from_address(id(cls) + offset)
            if field.value != flags:
                continue
            field.value = flags | _IMMUTABLE_TYPE
            if cls.__flags__ & _IMMUTABLE_TYPE:
                break
            field.value = flags  # (another field of the same value)


def empty_reply(call_id: int) -> dict:
    """A CallReply with nothing in it (an empty call's, and the start of every other)."""
    return {
        "call_id": call_id,
        "error": None,
        "violations": [],
        "values": [],
        "own_calls": 0,
        "profile_rows": [],
    }


class Runner:
    """Serves one model: ModelNew from a solution, or a task's own Model for baselines."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.torch = None
        self.model = None
        self.device = "cpu"
        self.ban = None
        self.own_calls = None
        self.thread_ban = None  # the ban on the solution's other threads (_ThreadBan)
        self.moves_data = False  # a data-movement task: PyTorch's copies refused in forward
        self.main = None  # a banned runner's keeper of its thread outside forward (_MainThread)
        self.retired: list = []  # CUDA: views replaced, dropped at the call's end under the ban
        self.shared: list = []  # CUDA: the driver's input and output buffers (_ImportedBuffer)
        self.views: dict = {}  # CUDA: views of them by (buffer, spec), kept for later calls
        self._null_ban = None  # the ban guarding empty "banned" calls (no op ever runs in it)
        self._prime_buf = None  # CUDA: the one-element tensor of "prime" (set at the first)
        self.state: list = []  # (module, name, tensor): the reference's state (_copy_state)
        self.waits = _GpuWaits()  # CUDA: asleep outside timed calls
        self._primed = False  # the next call is a timed one ("prime" came first)

    # -- set-up ---------------------------------------------------------------------------------

    def load(self, init: dict) -> dict:
        """Build the served model from a RunnerInit; the RunnerReady reply."""
        import torch

        self.torch = torch
        self.device = init["device"]
        _pin_numerics(torch)
        saved = torch.load(init["init_path"], weights_only=True)
        init_args, weights = saved["init_args"], saved["weights"]
        if init["module_dir"]:
            sys.path.insert(0, init["module_dir"])
        _default_build_directories(torch)
        _guard_extension_builds(torch, init.get("compile_extensions", True))
        if init["banned"]:  # before any candidate code runs, which could change `init`
            if init.get("thread_ban"):  # first: the ban's mode keeps what it finds in place
                self.thread_ban = _ThreadBan(
                    init["thread_ban"],
                    init["allowed_ops"],
                    init.get("thread_ban_opaque", []),
                    torch,
                )
            self.ban = _Ban(torch, set(init["allowed_ops"]), self.device)
            self.moves_data = "aten::copy_" not in init["allowed_ops"]
            self.own_calls = _OwnCalls(torch)
            self.main = _MainThread(self.ban.violations, self.own_calls.not_own)
            self.main.refuse_audit_hooks(init["solution_dir"])
            self.main.refuse_kernel_overrides(torch)
            self.ban.escapes.adopt()
            _freeze_types(_runner_types() + [type(self.ban.mode)])
        try:
            _enter_solution_folder(init["solution_dir"])
            solution = _import_file("model_new", os.path.join(init["solution_dir"], "model_new.py"))
            model_cls = getattr(solution, "ModelNew", None)
            if model_cls is None:
                raise AttributeError("model_new.py defines no class ModelNew")
            torch.manual_seed(init["init_seed"])
            model = model_cls(*init_args)
            missing = []
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device)
                own = model.state_dict()
                copied = {k: v for k, v in weights.items() if k in own and own[k].shape == v.shape}
                model.load_state_dict(copied, strict=False)
                missing = sorted(set(weights) - set(copied))
                self.state = _copy_state(torch, model, saved.get("state") or {}, self.device)
            if init["compile_model"]:
                model = torch.compile(model)
        except BaseException as exc:  # the solution's failure: reported, never raised
            text = _short_traceback(exc)
            failed = "Error building extension" in text or "ninja" in text.lower()
            return {
                "error": text,
                "build_failed": failed,
                "weights_not_copied": [],
                "violations": self._violations(),
            }
        self.model = model
        if self.main is not None:
            self.main.take_over()
        self._watch(_ThreadBan.ALL)
        if self.device == "cuda":
            self.waits.sleep()
        return {"error": None, "build_failed": False, "weights_not_copied": missing}

    # -- calls ----------------------------------------------------------------------------------

    def _fresh_state(self) -> None:
        """Give the next call the state of `_copy_state`, as the driver gives the reference's."""
        for module, name, value in self.state:
            if value is _ABSENT:
                vars(module).pop(name, None)
            else:
                setattr(module, name, value)

    def null(self, req: dict) -> dict:
        """An empty call, taken through a call's steps up to its "done"; the empty CallReply.

        Served before any code of the solution is loaded: the driver's measure of what every
        call costs besides forward (message, thread census, seeding, the fallback ban's guard
        when the call is "banned", synchronisation, "done"), subtracted from each timed call.
        """
        import torch

        if req.get("banned") is True and self._null_ban is None:
            self._null_ban = _Ban(torch, set())
        _thread_ids()  # the census a call takes before forward
        torch.random.default_generator.manual_seed(0)
        guard = self._null_ban.active() if self._null_ban else contextlib.nullcontext()
        with torch.no_grad(), guard:
            pass
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        _send(self.sock, {"call_id": req["call_id"], "done": True, "nonce": req.get("nonce")})
        return empty_reply(req["call_id"])

    def prime(self) -> None:
        """CUDA: run one tiny kernel and wait for it, right before a timed call.

        The driver's GPU work (the call's inputs, its L2 flush) came last: the device's switch
        to this process's context (~0.16 ms on the H200) is paid here, outside the timed window,
        and not by the first kernel of forward.
        """
        if self.device != "cuda":
            return
        self.waits.spin()
        self._primed = True
        self._watch(_ThreadBan.OFF)
        if self._prime_buf is None:
            self._prime_buf = self.torch.zeros(1, device="cuda")
        self._prime_buf.zero_()
        self._watch(_ThreadBan.ALL)
        self.torch.cuda.synchronize()

    def _buffer(self, fd: int, size: int):
        if size == 0:
            os.close(fd)
            return None
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        mapped = mmap.mmap(fd, size, flags=flags)
        os.close(fd)
        return self.torch.frombuffer(mapped, dtype=self.torch.uint8)

    def _place(self, buf, spec: dict):
        torch = self.torch
        if not spec["dtype"]:
            return spec["value"]
        dtype = getattr(torch, spec["dtype"])
        numel = 1
        for d in spec["shape"]:
            numel *= d
        if numel == 0 or buf is None:
            return torch.empty(spec["shape"], dtype=dtype, device=self.device)
        nbytes = numel * dtype.itemsize
        return buf[spec["offset"] : spec["offset"] + nbytes].view(dtype).view(spec["shape"])

    def _placed(self, which: int, buf, spec: dict):
        """`_place`, on CUDA reusing the view an earlier call of the same layout got.

        Making the views is ~0.1 ms of host work inside every timed call (a few tensor ops per
        argument). A kept view is used again only while its shape, strides and address are
        as made: one that forward changed in place (`x.squeeze_()`, `x.set_(...)`) is made again.
        """
        if self.device != "cuda" or not spec["dtype"] or buf is None:
            return self._place(buf, spec)
        key = (which, spec["offset"], tuple(spec["shape"]), spec["dtype"])
        kept = self.views.get(key)
        if kept is not None:
            view, made = kept
            if (view.shape, view.stride(), view.data_ptr(), view.requires_grad) == made:
                return view
        if kept is not None:  # (what forward hung on it is dropped under the ban: _settle)
            self.retired.append(self.views.pop(key))
        view = self._place(buf, spec)
        self.views[key] = (view, (view.shape, view.stride(), view.data_ptr(), False))
        return view

    def _sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _seed(self, seed: int) -> None:
        """Seed the generators forward can use, as `torch.manual_seed` does.

        Faster: it also looks for MPS, XPU and custom devices, inside every timed call
        (benchmarks/README.md, "Timing fidelity").
        """
        self.torch.random.default_generator.manual_seed(seed)
        if self.device == "cuda":
            self.torch.cuda.manual_seed_all(seed)

    def call(self, req: dict, fds: list) -> dict:
        """Serve one CallRequest; the CallReply."""
        started_at = _clock()
        torch = self.torch
        reply = empty_reply(req["call_id"])
        timed = False
        if self.device == "cuda":
            timed, self._primed = self._primed, False
            if not timed:
                self.waits.sleep()
            for fd in fds:
                os.close(fd)
            in_buf, out_buf = (b.tensor for b in self.shared)
        else:
            in_buf = self._buffer(fds[0], req["input_bytes"])
            out_buf = self._buffer(fds[1], req["output_bytes"])
        args = [self._placed(0, in_buf, spec) for spec in req["inputs"]]
        slots = [self._placed(1, out_buf, s) if s["dtype"] else None for s in req["outputs"]]
        if req["kind"] == "profile":
            reply["profile_rows"] = self.profile(args, req["profile_runs"])
            return reply
        threads_before = _thread_ids()
        own_before = self.own_calls.count if self.own_calls else 0
        events = self._events() if req.get("events") is True else None
        marks = [started_at] if events else None
        counting = req.get("count_own_calls", False)
        try:
            self._seed(req["forward_seed"])
            if events:
                marks.append(_clock())
                events[0].record()
            with torch.no_grad(), self._guard(counting):
                self._fresh_state()  # (the values it drops are dropped under the ban)
                out = self.model(*args)
                outputs = _outputs_of(out)  # under the ban, before "done"
                if self.main is not None:
                    self.main.check(self.own_calls.hook if counting else None)
            if events:
                events[1].record()
                marks.append(_clock())
            self._sync()
            if events:
                marks.append(_clock())
        except BaseException as exc:  # the candidate's failure: reported, the runner goes on
            reply["error"] = _short_traceback(exc)
            reply["violations"] = self._violations()
            return reply
        # The driver stops a timed call's clock here; what follows (checks, handing the outputs
        # over) it times apart and compares with the baselines' (cuda_gym.judge.driver).
        _send(self.sock, {"call_id": req["call_id"], "done": True, "nonce": req.get("nonce")})
        started = _thread_ids() - threads_before
        reply["own_calls"] = (self.own_calls.count - own_before) if self.own_calls else 0
        reply["violations"] = self._output_violations(outputs, args)
        reply["values"], reply["error"] = self._deliver(outputs, req["outputs"], slots)
        held = [out, outputs, args, slots, in_buf, out_buf]
        del out, outputs, args, slots, in_buf, out_buf
        self._settle(held)
        reply["violations"] = self._violations() + reply["violations"]
        self._sync()
        if self.device == "cuda" and not timed:
            # Forward's freed temporaries back to the device before the driver's next reference
            # pass, which needs room of its own (timed calls keep them: no allocation in them).
            torch.cuda.empty_cache()
        if events:
            reply["event_ms"] = events[0].elapsed_time(events[1])
            reply["marks"] = marks
        if started:
            time.sleep(0.05)
            if started - _thread_ids():
                reply["violations"].append(
                    "async_work: ModelNew.forward started a host thread that outlived the call"
                )
        return reply

    def _settle(self, held: list) -> None:
        """Drop what forward saw and returned, under the ban where that could run its code.

        Also CUDA views the call replaced, and a garbage collection when one is due
        (_MainThread). Nothing to drop that carries anything of the solution's (the common
        case) and no collection due: no ban, whose guard would lengthen every call's finish.
        """
        if self.main is None:
            held.clear()
            return
        extras = self.retired or _MainThread.carries_extras(self.torch, held)
        if not (extras or self.main.collection_due()):
            held.clear()
            return
        with self.torch.no_grad(), self._guard(forward=False):
            _MainThread.strip(self.torch, held)  # (CUDA: the inputs' views outlive the call)
            held.clear()
            self.retired.clear()
            if self.main.collection_due():
                self.main.collect()
            self.main.check()

    def _allow_copy(self, slot) -> None:
        """Let the thread ban pass the runner's one copy into `slot` (None: no copy now)."""
        if self.thread_ban is not None:
            self.thread_ban.allow_copy(slot.data_ptr() if slot is not None else None)

    def _watch(self, level: int) -> None:
        """How the thread ban judges this thread's ops (_ThreadBan.OFF, ALL or NESTED)."""
        if self.thread_ban is not None:
            self.thread_ban.watch(level)

    def _events(self):
        """Two timing events around forward, for a traced call on CUDA (diagnostics only)."""
        if self.device != "cuda":
            return None
        return [self.torch.cuda.Event(enable_timing=True) for _ in range(2)]

    def _guard(self, count_own_calls: bool = False, forward: bool = True):
        """The ban, entered; for forward (`forward`) the thread ban judges every op as well.

        In forward the mode and the thread ban both judge this thread's calls (the thread ban
        also what runs inside one, and what runs with the mode popped). Everywhere else the
        thread ban judges this thread's ops too (_watch): the runner's own
        steps call only allowed ops (views of the driver's buffers; its copy into a slot is
        allowed once, by address), so any other op there is code of the solution's.
        """
        if self.ban is None:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        if count_own_calls:
            stack.enter_context(self.own_calls.active())
        stack.enter_context(self.ban.active())
        if forward and self.thread_ban is not None:
            # Forward's calls at every depth: the mode's own (judged twice, to the same rule),
            # what runs inside one the mode let through (with the mode popped), and calls made
            # with the mode popped by C++ that took torch's stack functions at import (red-team
            # round 22: PyTorch's copy_ transposed a data-movement task, reward 3 under NESTED).
            self._watch(_ThreadBan.ALL)
        return stack

    def _violations(self) -> list:
        if self.ban is None:
            return []
        found, self.ban.violations[:] = list(self.ban.violations), []
        if self.thread_ban is not None:
            found += self.thread_ban.take()
        return found

    def _output_violations(self, outputs: list, args: list) -> list:
        torch = self.torch
        found = []
        spans = []
        for a in args:
            if isinstance(a, torch.Tensor) and a.numel():
                start = a.untyped_storage().data_ptr()
                spans.append((start, start + a.untyped_storage().nbytes()))
        for o in outputs:
            if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:
                found.append(f"output_type: output is a {type(o).__name__}, not a plain Tensor")
            elif isinstance(o, torch.Tensor) and o.numel():
                lo = o.untyped_storage().data_ptr()
                hi = lo + o.untyped_storage().nbytes()
                if any(lo < a_hi and a_lo < hi for a_lo, a_hi in spans):
                    found.append("output_alias: an output shares memory with an input")
                elif self.moves_data and (not o.is_contiguous() or o.is_conj() or o.is_neg()):
                    # Handed over, it is copied into the driver's dense slot: on a task that
                    # only moves data, that copy (a transpose of a plain copy returned as a
                    # transposed view) would be the task's work, done outside forward.
                    found.append(
                        "no_own_kernel: an output is a strided (or lazily negated or conjugated)"
                        " view, not a dense row-major tensor: on a task that only moves data, the"
                        " copy that hands it over would do the task's work"
                    )
            elif not isinstance(o, torch.Tensor) and not _plain(o):
                found.append(f"output_type: output is a {type(o).__name__}, not a plain Tensor")
        return found

    def _deliver(self, outputs: list, specs: list, slots: list):
        """Copy the outputs into the driver's slots: (non-tensor values, error or None)."""
        torch = self.torch
        values = []
        if len(outputs) != len(specs):
            return [], f"forward returned {len(outputs)} outputs, the reference {len(specs)}"
        for k, (o, spec, slot) in enumerate(zip(outputs, specs, slots)):
            if not spec["dtype"]:
                values.append(o if _plain(o) else None)
                continue
            values.append(None)
            if type(o) is not torch.Tensor:
                return values, f"output {k} is a {type(o).__name__}, the reference's a Tensor"
            dtype = str(o.dtype).removeprefix("torch.")
            if list(o.shape) != spec["shape"] or dtype != spec["dtype"]:
                return values, (
                    f"output {k} has shape {tuple(o.shape)} and dtype {o.dtype}; the reference's"
                    f" {tuple(spec['shape'])} and {spec['dtype']}"
                )
            if o.device.type != self.device:
                return values, f"output {k} is on {o.device}, not on {self.device}"
            if not o.numel():
                continue
            if self.device == "cpu" and _dense_plain(torch, o):
                # By libc's memmove, not PyTorch's copy kernel: on a task that only moves data
                # any copy kernel sampled in a call is then the solution's (judge/cpu_time.py),
                # after "done" too (a thread of its own copying while this hands over).
                _MEMMOVE(slot.data_ptr(), o.data_ptr(), o.nbytes)
                continue
            self._allow_copy(slot)
            try:
                slot.copy_(o)
            finally:
                self._allow_copy(None)
        return values, None

    def profile(self, args: list, runs: int) -> list:
        """[name, calls, total ms] of the top kernels (operators on the CPU) over `runs` calls."""
        torch = self.torch
        on_cuda = self.device == "cuda"
        calls = [
            [a.clone() if isinstance(a, torch.Tensor) else a for a in args] for _ in range(runs)
        ]
        self._sync()
        with (
            torch.no_grad(),
            torch.autograd.profiler.profile(
                use_cpu=True, use_device="cuda" if on_cuda else None, use_kineto=True
            ) as prof,
        ):
            for call_args in calls:
                # On the CPU a range around the whole call (on CUDA it would become a GPU-side
                # annotation, summed with the kernels inside it).
                whole = (
                    contextlib.nullcontext()
                    if on_cuda
                    else torch.autograd.profiler.record_function("ModelNew.forward (whole call)")
                )
                with whole, self._guard():
                    self._fresh_state()
                    self.model(*call_args)
            self._sync()
        self._violations()  # the correctness calls reported them
        rows = []
        for evt in prof.key_averages():
            if on_cuda:
                total_us = getattr(evt, "self_device_time_total", 0) or 0
                if total_us <= 0 or evt.device_type != torch.autograd.DeviceType.CUDA:
                    continue
            else:
                total_us = evt.self_cpu_time_total
                if total_us <= 0:
                    continue
            rows.append([str(evt.key)[:300], int(evt.count), float(total_us) / 1e3])
        rows.sort(key=lambda r: r[2], reverse=True)
        return rows[:200]

    def share(self, message: dict, fds: list) -> None:
        """CUDA: map the driver's input and output buffers from their file descriptors."""
        with self.torch.no_grad(), self._guard(forward=False):  # (as in _settle)
            self.views = {}
            self.retired.clear()
        self._watch(_ThreadBan.OFF)
        for buf in self.shared:
            buf.close(self.torch)
        self.shared = []
        sizes = (
            (message["input_bytes"], message["input_alloc"]),
            (message["output_bytes"], message["output_alloc"]),
        )
        self.shared = [
            _ImportedBuffer(self.torch, fd, n, alloc) for fd, (n, alloc) in zip(fds, sizes)
        ]
        self._watch(_ThreadBan.ALL)


def _with_arguments(load, edit):
    """`load` (a torch extension loader) whose bound arguments pass through `edit` first."""
    import inspect

    signature = inspect.signature(load)

    @functools.wraps(load)
    def wrapped(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return load(*args, **kwargs)  # let torch word the error
        edit(bound)
        return load(*bound.args, **bound.kwargs)

    return wrapped


def _default_build_directories(torch) -> None:
    """Build and look up every torch extension under TORCH_EXTENSIONS_DIR/<name>.

    Solutions written elsewhere name their own `build_directory` (a hashed folder in the temp
    directory, say). The judge's build stage and the runner are different sandboxes with
    different temp directories, so the runner would look where the build stage never built;
    under the default directory both meet, and the judge collects what the build stage built.
    """
    from torch.utils import cpp_extension

    def without_build_directory(bound) -> None:
        bound.arguments.pop("build_directory", None)
        for param in bound.signature.parameters.values():
            if param.kind is param.VAR_KEYWORD:
                bound.arguments.get(param.name, {}).pop("build_directory", None)

    for name in ("load", "load_inline"):
        loader = getattr(cpp_extension, name)
        setattr(cpp_extension, name, _with_arguments(loader, without_build_directory))


# Directory of a precompiled torch/extension.h (given to a build as -I DIR) -> the path of the
# precompiled binding prelude beside it, or None where that is not made yet.
_BINDING_PRELUDES: dict[str, str | None] = {}


def _precompiled_headers() -> set:
    """Let the build stage's extension builds read the judge's precompiled torch header.

    A load_inline / cpp_extension.load call whose settings match a variant of $CUDA_GYM_INLINE_PCH
    gets `-I DIR` (searched before torch's -isystem directories, so GCC finds DIR's .gch for
    `#include <torch/extension.h>`, or parses the header when the .gch does not fit). Returns
    the set the matched variants' names are added to: the judge makes those it lacks.
    """
    from torch.utils import cpp_extension

    wanted: set = set()
    try:
        table = json.loads(os.environ.pop(PCH_ENV, "") or "{}")
    except ValueError:
        return wanted
    variants, dirs = table.get("variants") or {}, table.get("dirs") or {}
    preludes = table.get("preludes") or {}
    _BINDING_PRELUDES.update({d: preludes.get(name) for name, d in dirs.items()})

    def matched(arguments: dict, inline: bool) -> str | None:
        cuda = arguments.get("with_cuda")
        if cuda is None and inline:
            cuda = bool(arguments.get("cuda_sources"))
        elif cuda is None:
            sources = arguments.get("sources") or []
            sources = [sources] if isinstance(sources, str) else sources
            cuda = any(str(path).endswith((".cu", ".cuh")) for path in sources)
        flags = arguments.get("extra_cflags") or []
        flags = [f for f in flags if isinstance(f, str) and f.strip()]
        return next(
            (name for name, (c, f) in variants.items() if c == bool(cuda) and list(f) == flags),
            None,
        )

    def with_header(bound, inline: bool) -> None:
        name = matched(bound.arguments, inline)
        if name is not None:
            wanted.add(name)
            if name in dirs:
                flags = list(bound.arguments.get("extra_cflags") or [])
                bound.arguments["extra_cflags"] = [*flags, f"-I{dirs[name]}", "-Winvalid-pch"]

    if variants:
        cpp_extension.load = _with_arguments(
            cpp_extension.load, lambda bound: with_header(bound, inline=False)
        )
        cpp_extension.load_inline = _with_arguments(
            cpp_extension.load_inline, lambda bound: with_header(bound, inline=True)
        )
    return wanted


# A load_inline cuda.cu compiles first with a light set of ATen headers in place of
# torch/types.h (which load_inline puts at its top) and torch/extension.h: the tensor class, the
# dispatch macros, the common factories and torch's names for them. nvcc parses the torch headers
# it reads twice (cudafe++ and cicc) and GCC once more; ATen/ATen.h declares every operator.
# When that build fails it is made with torch/types.h in place of torch/extension.h, then as
# written. Sources naming what only the full header declares skip the lighter tries.
_FULL_HEADER = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/extension\.h[>"]', re.MULTILINE)
_TYPES_HEADER = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/types\.h[>"]', re.MULTILINE)
_LIGHT_HEADER = "#include <torch/types.h>"
_ATEN_HEADERS = (
    "ATen/core/Tensor.h",
    "ATen/Dispatch.h",
    "ATen/ops/empty.h",
    "ATen/ops/empty_like.h",
    "ATen/ops/empty_strided.h",
    "ATen/ops/zeros.h",
    "ATen/ops/zeros_like.h",
    "ATen/ops/ones.h",
    "ATen/ops/ones_like.h",
    "ATen/ops/full.h",
    "ATen/ops/full_like.h",
    "optional",
)
# torch's spellings of ATen's names (torch/types.h's own declarations, written out).
_TORCH_NAMES = (
    "using namespace at;",
    "using std::nullopt;",
    "using std::optional;",
    "using Dtype = at::ScalarType;",
    *(
        f"constexpr auto k{name} = at::k{aten};"
        for name, aten in (
            ("UInt8", "Byte"),
            ("Int8", "Char"),
            ("Int16", "Short"),
            ("Int32", "Int"),
            ("Int64", "Long"),
            ("UInt16", "UInt16"),
            ("UInt32", "UInt32"),
            ("UInt64", "UInt64"),
            ("Float16", "Half"),
            ("Float32", "Float"),
            ("Float64", "Double"),
        )
    ),
    *(
        f"constexpr auto k{short} = k{name};"
        for short, name in (
            ("U8", "UInt8"),
            ("U16", "UInt16"),
            ("U32", "UInt32"),
            ("U64", "UInt64"),
            ("I8", "Int8"),
            ("I16", "Int16"),
            ("I32", "Int32"),
            ("I64", "Int64"),
            ("F16", "Float16"),
            ("F32", "Float32"),
            ("F64", "Float64"),
        )
    ),
)
_ATEN_BLOCK = (
    "".join(f"#include <{h}>\n" for h in _ATEN_HEADERS)
    + "namespace torch {\n"
    + "".join(f"{line}\n" for line in _TORCH_NAMES)
    + "}  // namespace torch (cuda_gym's build stage: light torch headers)"
)
_FULL_HEADER_NAMES = (
    "PYBIND11",
    "pybind11",
    "py::",
    "torch::nn",
    "torch::autograd",
    "torch::jit",
    "torch::optim",
    "torch::cuda::",
    "torch::python",
    "THP",
)


def lighter_sources(text: str) -> list[str]:
    """The texts a load_inline cuda.cu is first built from, lightest first (none: as written).

    torch/types.h and torch/extension.h give way to the ATen headers of `_ATEN_BLOCK` (the
    first include becomes the block, later ones go); then, where the source includes
    torch/extension.h, that include alone gives way to torch/types.h.
    """
    if any(name in text for name in _FULL_HEADER_NAMES):
        return []
    out = []
    if _FULL_HEADER.search(text) or _TYPES_HEADER.search(text):
        both = re.compile(f"{_FULL_HEADER.pattern}|{_TYPES_HEADER.pattern}", re.MULTILINE)
        first = [True]

        def block(match: re.Match) -> str:
            if first[0]:
                first[0] = False
                return _ATEN_BLOCK
            return ""

        out.append(both.sub(block, text))
    if _FULL_HEADER.search(text):
        out.append(_FULL_HEADER.sub(_LIGHT_HEADER, text))
    return out


# The binding prelude (cuda_gym.judge.pch makes its .gch): what binding code needs of torch,
# without torch/extension.h's C++ frontend, whose headers emit code into every file.
BINDING_PRELUDE = """#pragma once
// cuda_gym's binding prelude (cuda_gym/judge/pch.py): precompiled, included first.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/Exceptions.h>
"""
# What only torch/extension.h declares: sources naming these are built as written.
_FRONTEND_NAMES = (
    "torch::nn",
    "torch::autograd",
    "torch::jit",
    "torch::optim",
    "torch::data",
    "torch::serialize",
    "torch::python",
    "torch::cuda::",
    "torch::fft",
    "torch::linalg",
    "torch::special",
    "torch::nested",
    "torch::sparse",
    "torch::enumtype",
    "torch::Library",
    "torch::NoGradGuard",
    "torch::AutoGradMode",
    "torch::InferenceMode",
    "torch::manual_seed",
    "TORCH_LIBRARY",
    "TORCH_MODULE",
)
_TORCH_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](torch|ATen|c10|pybind11)/', re.M)


def binding_text(text: str, prelude: str | None) -> str | None:
    """A C++ source rewritten to include the binding prelude first, or None to build it as is.

    `prelude`: the prelude's path (its .gch beside it), or None for its headers as text. The
    source's includes of torch/extension.h go (the prelude stands in for them; their lines stay,
    empty) and `#line 1` keeps the compiler's line numbers the source's. None when the source
    names the C++ frontend (`_FRONTEND_NAMES`) or includes no torch header.
    """
    if any(name in text for name in _FRONTEND_NAMES) or not _TORCH_INCLUDE.search(text):
        return None
    first = f'#include "{prelude}"\n' if prelude else BINDING_PRELUDE.split("\n", 2)[2]
    return first + "#line 1\n" + _FULL_HEADER.sub("", text)


def _lighter_cuda_builds(cpp_extension) -> None:
    """Build load_inline's files with lighter headers first, then as written.

    cuda.cu: the texts of `lighter_sources`; main.cpp: `binding_text`, with the judge's
    precompiled prelude where the build reads a variant's headers (`_BINDING_PRELUDES`).
    Wraps torch's build step: the files load_inline wrote into the build directory are
    rewritten for a build and always put back as written. After a failed build, each file
    whose object was not made moves to its next text (a file that compiled keeps its text, so
    ninja does not compile it again); last, the files that never compiled are built as
    written, whose error is the one reported. The library's name does not change, so the
    runner imports it as built.
    """
    import inspect

    build = cpp_extension._write_ninja_file_and_build_library
    signature = inspect.signature(build)

    def texts_of(path: str, directory: str, flags: list, text: str) -> list[str]:
        if path == os.path.join(directory, "cuda.cu"):
            return lighter_sources(text)
        if path != os.path.join(directory, "main.cpp"):
            return []
        # The prelude of the torch/extension.h .gch the build reads (-I DIR); while only that
        # .gch is made, main.cpp as written; with none, the prelude's headers as text.
        dirs = [f[2:] for f in flags if isinstance(f, str) and f[2:] in _BINDING_PRELUDES]
        if dirs and not _BINDING_PRELUDES[dirs[0]]:
            return []
        light = binding_text(text, _BINDING_PRELUDES[dirs[0]] if dirs else None)
        return [light] if light else []

    def lighter_first(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
            directory = os.path.realpath(bound.arguments["build_directory"])
            flags = list(bound.arguments.get("extra_cflags") or [])
            tries, written = {}, {}
            for path in bound.arguments["sources"]:
                path = os.path.realpath(path)
                if os.path.dirname(path) != directory:
                    continue
                try:
                    with open(path) as handle:
                        text = handle.read()
                except (OSError, UnicodeDecodeError):
                    continue
                texts = texts_of(path, directory, flags, text)
                if texts:
                    tries[path], written[path] = texts, text
        except (TypeError, KeyError):
            tries = {}
        if not tries:
            return build(*args, **kwargs)
        at, compiled = dict.fromkeys(tries, 0), set()
        try:
            while True:
                for path, texts in tries.items():
                    _write_if_changed(path, texts[at[path]])
                started = time.time()
                try:
                    return build(*args, **kwargs)
                except Exception:  # the next texts; as written last, whose error is reported
                    pass
                moved = False
                for path, texts in tries.items():
                    if _object_since(path, started) or path in compiled:
                        compiled.add(path)
                    elif at[path] + 1 < len(texts):
                        at[path] += 1
                        moved = True
                if not moved:
                    break
            # Last, what failed as written (its error is reported); what compiled stays, unless
            # everything did (the link failed): then all as written.
            if compiled == set(tries):
                compiled = set()
            for path, text in written.items():
                _write_if_changed(path, tries[path][at[path]] if path in compiled else text)
            return build(*args, **kwargs)
        finally:
            for path, text in written.items():
                _write_if_changed(path, text)

    cpp_extension._write_ninja_file_and_build_library = lighter_first


def _write_if_changed(path: str, text: str) -> None:
    """Write `text` unless the file holds it (ninja rebuilds what is touched)."""
    try:
        with open(path) as handle:
            if handle.read() == text:
                return
    except (OSError, UnicodeDecodeError):
        pass
    with open(path, "w") as handle:
        handle.write(text)


def _object_since(source: str, started: float) -> bool:
    """Whether the object torch's build makes of `source` was written after `started`."""
    stem, suffix = os.path.splitext(source)
    obj = f"{stem}.cuda.o" if suffix == ".cu" else f"{stem}.o"
    try:
        return os.path.getmtime(obj) >= started
    except OSError:
        return False


def _guard_extension_builds(torch, allow_compile: bool) -> None:
    """Serve torch extensions (load_inline, cpp_extension.load) from the judge's build stage.

    The judge built them before this process started (`prebuild`, off the device); their
    libraries are under TORCH_EXTENSIONS_DIR. An extension whose library is there is imported
    without running ninja; one that is not would compile here, on the device's time: refused
    unless `allow_compile` (the build stage could not import model_new.py without a GPU).
    """
    from torch.utils import cpp_extension

    build = cpp_extension._write_ninja_file_and_build_library  # AttributeError: a changed torch

    def prebuilt_or_refuse(*args, **kwargs):
        name = kwargs.get("name", args[0] if args else "")
        directory = kwargs.get("build_directory", "")
        suffix = "" if kwargs.get("is_standalone") else ".so"
        if directory and os.path.isfile(os.path.join(directory, f"{name}{suffix}")):
            return None
        if allow_compile:
            return build(*args, **kwargs)
        raise RuntimeError(
            f"the torch extension {name!r} would be compiled while the solution is judged: the"
            " judge's build stage (which imports model_new.py once, with no GPU) did not build"
            " it. Build every extension unconditionally when model_new.py is imported."
        )

    cpp_extension._write_ninja_file_and_build_library = prebuilt_or_refuse


def prebuild(solution_dir: str, result_path: str) -> None:
    """The build stage: import model_new.py so its torch extensions compile, with no GPU.

    The extensions land under TORCH_EXTENSIONS_DIR, where the judge collects them; the result
    says whether the import failed and whether a build did. Nothing here is trusted: a wrong
    report only makes the solution's own judgement fail.
    """
    result = {"error": None, "build_failed": False}
    wanted: set = set()
    try:
        import torch  # what model_new.py imports first anyway

        _default_build_directories(torch)
        wanted = _precompiled_headers()
        from torch.utils import cpp_extension

        _lighter_cuda_builds(cpp_extension)
        _enter_solution_folder(solution_dir)
        _import_file("model_new", os.path.join(solution_dir, "model_new.py"))
    except BaseException as exc:
        text = _short_traceback(exc)
        result = {"error": text, "build_failed": "Error building extension" in text}
    result["pch_wanted"] = sorted(wanted)
    with open(result_path, "w") as handle:
        json.dump(result, handle)
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    """Entry point: `python -I runner.py FD` (only the driver starts it).

    `python -I runner.py prebuild SOLUTION_DIR RESULT_PATH` is the judge's build stage.
    """
    if sys.argv[1] == "prebuild":
        prebuild(sys.argv[2], sys.argv[3])
    sock = socket.socket(fileno=int(sys.argv[1]))
    # The runner's own module is not left where candidate code looks first (sys.modules); its
    # functions keep their globals. (Within one process this only raises the bar: see
    # cuda_gym.judge.driver on what the runner's reports are worth.)
    sys.modules["__main__"] = types.ModuleType("__main__")
    # Seconds of host work, done before the driver takes the device gate for the load.
    import torch  # noqa: F401

    _send(sock, {"started": True})
    runner = Runner(sock)
    init, _ = _receive(sock)
    # Empty calls before any of the candidate's code is loaded: the driver's measure of a
    # call's fixed cost, which it subtracts from every timed call. Measured later, code of the
    # candidate's (a thread holding the GIL) could stall them and shrink every timed call.
    while init is not None and init.get("kind") == "null":
        _send(sock, runner.null(init))
        init, _ = _receive(sock, _spin_s(init))
    if init is None:
        os._exit(0)
    ready = runner.load(init)
    _send(sock, ready)
    if ready["error"] is not None:
        os._exit(0)
    spin_s = 0.0
    while True:
        message, fds = _receive(sock, spin_s)
        if message is None or message.get("kind") == "exit":
            break
        # The driver's next call follows soon (a GPU timing loop): poll for it (_receive).
        spin_s = _spin_s(message)
        if message.get("kind") == "share":
            runner.share(message, fds)
            _send(sock, {"shared": True})
            continue
        if message.get("kind") == "prime":
            runner.prime()
            _send(sock, {"primed": True})
            continue
        _send(sock, runner.call(message, fds))
    sys.stdout.flush()
    # Skip interpreter teardown: a candidate's extension may crash in static destructors.
    os._exit(0)


if __name__ == "__main__":
    main()
