"""Where the candidate's forward spent its CPU time: its own code, or someone else's compute.

On the CPU the fallback ban sees PyTorch's operators only when they pass the dispatcher, and
the symbol check sees only the functions an extension names. Compute reached any other way (a
function found by address in libtorch's memory, NumPy's kernels called from C++ through
pybind11, a BLAS library opened by hand) shows in where the process's CPU time went. The driver
samples the runner from outside (cuda_gym.runtime.perf_sampling) while forward runs, and each
sample's instruction pointer is put in one of these places:

- own: the solution's compiled extensions, known by content (the SHA-256 of the objects the
  judge built, read through /proc/PID/map_files: the very file mapped, whatever its name);
- runtime: the C and C++ runtime and PyTorch's code other than its compute kernels
  (allocation, dispatch, tensor bookkeeping, the allowed operators' views, copies and fills,
  Sleef's vector math that ATen's inline vector code calls), from the system's and this
  Python's read-only directories only;
- interpreter: the Python interpreter and its standard library's extension modules (forward's
  glue, or arithmetic done element by element in Python);
- idle: OpenMP's runtimes (threads waiting at barriers, whoever's work they wait for), counted
  apart from the shares;
- kernel: the Linux kernel (page faults, system calls), sampled only per CPU (see CpuWatch) and
  counted apart too;
- torch_compute: PyTorch's compute kernels (`at::native::`, `at::cpu::`, MKL, oneDNN, FBGEMM,
  BLAS and LAPACK names; libtorch_cpu's functions named by
  addr2line), which an allowed operator never runs;
- foreign: any other code: another library (NumPy, OpenBLAS, a system BLAS), a file the runner
  wrote (whatever its name), anonymous executable memory, an address no mapping held when seen.

Samples between forward's calls (from the first call on) are counted apart: work there
(a thread the solution left computing) is `async_work`.

`assess` turns the counts into a `foreign_kernels` violation when torch_compute and foreign
together are a real amount of time (`MIN_SAMPLES` samples) and either a real share of all of
forward's (`MAX_SHARE`) or found in calls where they are a quarter of the call's (`CALL_SHARE`:
own work banked in some calls does not hide compute that is not the solution's in the others).
An honest solution has none but the odd misattributed sample. The interpreter is the other
way to compute without a kernel (an extension that only copies tensors to Python lists and
back): `foreign_kernels` too when it takes more of each call than glue could
(`PY_MS_PER_CALL`; on a GPU also most of forward's sampled time, `PY_SHARE`).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import hashlib
import importlib.util
import math
import os
import random
import re
import select
import shutil
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cuda_gym.judge import library_copies
from cuda_gym.judge.config import CPU_SAMPLE_PERIOD_NS as PERIOD_NS
from cuda_gym.judge.config import samples_per_cpu
from cuda_gym.judge.fallback import ALLOWED_OPS
from cuda_gym.judge.inline_build import is_extension_module
from cuda_gym.judge.native_checks import _SYSTEM_ROOTS
from cuda_gym.judge.verdict import ViolationKind, format_violation
from cuda_gym.runtime.perf_sampling import (
    KERNEL_IP,
    Mapping,
    PerfSampler,
    PerfUnavailable,
    Samples,
    executable_maps,
    kernel_symbol,
    process_tree,
    tree_cpu_ns,
    tree_cpu_s,
    tree_cpu_times,
)
from cuda_gym.runtime.process_memory import file_digests, memory_matches, written_code

MIN_SAMPLES = 5  # 10 ms of CPU time in someone else's compute ...
MAX_SHARE = 0.05  # ... and a twentieth of the sampled time of forward's calls, or
CALL_SHARE = 0.25  # ... in calls where it is at least a quarter of the call's sampled time;
# ... or, on the CPU, this much whatever the share: padding (own code spinning 50 times as long
# as MKL's GEMM beside it, libc's memset on another core) must not dilute it. Honest corpora
# (the false-rejection suite, the exploit suite's accepted cases): none at all.
CPU_BAD_SAMPLES = 10
# ... or, on the CPU, this many beside little of the solution's own code: a small task's whole
# answer from MKL's GEMM is only a few samples over all of forward's calls (red team: 2 MKL
# samples beside 6 own in 94 calls, 2.3 times eager's speed).
CPU_BAD_MIN = 2
CPU_BAD_OWN_SHARE = 0.1
# (Not on a task that only moves data: there the whole task is a few samples of NumPy's strided
# copy, which own code spinning beside it diluted below that share: red-team round 21's
# numpy_array_interface_transpose, 2 NumPy samples beside 288 own, reward 1 behind the static
# rules. An honest kernel there has no such sample: legit_transpose_pad_kernel, the FR corpus.)
# Work between forward's calls (a thread left computing slows every other judgement on the
# machine): 60 ms of CPU time sampled outside the calls, OpenMP's waits aside. On the CPU the
# kernel's time counts there too (a thread spinning on the clock or on system calls: red team,
# a GIL held between two calls, 13 of its 53 samples in the kernel). Honest corpora between
# calls, on the CPU: at most 13 such samples (a load of ~5 on 2 cores); on a GPU: none.
BETWEEN_SAMPLES = 30
# On the CPU, forward is refused as kernel-free when at least MOVE_MIN_SAMPLES are sampled after
# its first call, MOVE_SHARE of them in PyTorch's non-compute code (allowed ops, dispatch) and
# at most OWN_MIN_SHARE in the solution's own. (PyTorch's non-compute code is its dispatch and
# allocation too: a tiny honest kernel has more samples there than in its own code.)
MOVE_MIN_SAMPLES = 20
MOVE_SHARE = 0.5
OWN_MIN_SHARE = 0.02
# Python sampled this often on a thread other than its process's main one (Attribution's
# python_off_main) is `foreign_kernels`: a few samples, not one, so that no stray sample decides.
PYTHON_OFF_MAIN_SAMPLES = 3
# The same on the CPU from the runner's whole CPU time (user and kernel, /proc), outside the
# calls from its load on: an honest runner waits for its next call asleep (OpenMP's workers
# spin a little after each call), and /proc counts in 10 ms ticks.
OUTSIDE_CALLS_CPU_S = 1.0
# ... less the time OpenMP's workers were sampled waiting between calls (libgomp spins a while
# after each parallel region before it sleeps: an honest at::parallel_for transpose, ~270
# calls, 0.4-0.8 s outside its calls, 1.4 s on a busy 2-core VM; sampled between calls ~1.5 ms
# a call on 2 cores), up to this much a call. More is a core burned between calls, whoever spins
# (red-team round 34: threads of the solution's passing an omp_lock_t back and forth spun in
# libgomp's lock code, ~9 ms a call): `async_work` (with BETWEEN_SAMPLES, `assess`).
OPENMP_WAIT_S_PER_CALL = 0.0025  # ... for each core the runner may use (an OpenMP worker each)
# ... and none sampled this long after the last call ended (libgomp spins a bounded count of
# iterations, ~1-3 ms, after a parallel region: round 34's threads spun until the next call).
OPENMP_SPIN_NS = 25_000_000
# Forward's user-mode CPU time (/proc, which counts threads that have ended) that no sample saw,
# half of forward's time outside its own code (which an own spin would otherwise pad). Sampled
# per thread, each thread every PERIOD_NS of its own CPU time, work split over threads that
# each end before that is never seen (PyTorch's GEMM called in 1 ms slices, each from a new
# thread: 77-88 % unseen); per CPU it is, and this only catches threads the sampler could not
# follow. Honest forwards, per thread: at most 0.08 s (the false-rejection corpus); a thread
# per core per call, each 13 ms: 0.16 s, 22 %.
UNSAMPLED_MIN_S = 0.25
UNSAMPLED_SHARE = 0.5
# Sampled per CPU, nothing honest goes unseen (the false-rejection corpus and the exploit
# suite's accepted cases, two judgements at once on the 2-core VM: at most 0.04 s, of up to
# 1.9 s), so the share is of all of forward's time there, and smaller: padding with work
# sampled elsewhere (libc's memset on the other core) must not dilute it. With the timers
# re-armed at random no thread can dodge the ticks; what this rule catches is threads the
# sampler could not follow and records lost to a full ring. (Until 0f439b2 a mapping record
# garbled the rest of a ring's drain: honest runners on a busy machine lost up to 70 % of
# their samples, and this rule stood at half and 0.5 s meanwhile.)
UNSAMPLED_SHARE_PER_CPU = 0.05
UNSAMPLED_MIN_S_PER_CPU = 0.25
# The solution's own code is compared with its file while calls run (CpuWatch.window): every
# CODE_CHECK_EVERY_S through each untimed call, once in this share of the timed ones.
CODE_CHECK_TIMED_SHARE = 0.25
CODE_CHECK_EVERY_S = 0.002

# Python's interpreter computing: most of forward's sampled time, and more per call than the
# runner's own Python around a call (1-2.3 ms measured per call on the 2-core VM, honest
# corpora) plus forward's glue could take.
# (The share only on a GPU: on the CPU anything sampled beside the interpreter, libc's memset on
# another core, would dilute it, and the time per call alone tells: honest corpora's runners
# spend at most 1.3 ms of Python per call, a time loop around 1,024 own calls 16 ms.)
PY_MIN_SAMPLES = 15
PY_SHARE = 0.6
PY_MS_PER_CALL = 5.0
# ... and, on the CPU, more than a Python loop around the solution's own functions takes for
# each call it makes (an honest time loop: ~11 us of interpreter per step on the 2-core VM
# alone, false-rejection case rnn_python_time_loop; 31 us, over the 30 allowed until then, with
# two judgements on its two cores: 74 samples in 5 calls, against 93 of its own code).
PY_MS_PER_OWN_CALL = 0.05
# ... but never more than this many times the solution's own code's sampled time per call,
PY_OWN_BACKING = 1.0
# ... nor than this many times the reference's forward: a Python loop mirrors the reference's
# work, not more. Honest: rnn_python_time_loop's 15 ms of Python per call against its
# reference's 7.1 ms (2.1x). Red-team rounds 20/21: many short own spin calls bought 15-110 ms
# of Python per call, which did transpose_pad (0.75 ms eager) in 183 ms of list arithmetic.
PY_REFERENCE_FACTOR = 10.0
# On a CPU task that only moves data, less: the floor and the reference's multiple. Honest
# legit_transpose_pad_kernel: 0.33-0.6 ms a call of interpreter and bindings (the runner's
# glue in forward's window), 0.75 ms eager. Red-team round 25: zip(*rows), tuple slicing
# and a view's tolist from C++ transposed the input in 1.9-4.1 ms of Python a call, under the
# 5 ms floor.
PY_MOVES_MS_PER_CALL = 1.2
PY_MOVES_REFERENCE_FACTOR = 2.0

# On a GPU, the solution's own host code computing (data copied to the host and back): its
# host code is argument checks and launches, microseconds a call (launches themselves run in
# the CUDA libraries, runtime). A 64K-element elementwise loop on the host is ~0.3 ms a call.
HOST_MIN_SAMPLES = 15
HOST_MS_PER_CALL = 0.1
# ... and more where forward calls its own functions many times (a Python loop over time steps,
# one launch each): pybind11's dispatch and argument casts run in the solution's own library,
# and this is what each may take (a call of seven tensors, its casts and checks: 2.5 us of CPU
# on the 2-core VM, libtorch's and the interpreter's share included). An attacker's empty
# calls buy time at this rate: the smaller, the dearer.
HOST_MS_PER_OWN_CALL = 0.01

PLACES = ("own", "runtime", "interpreter", "torch_compute", "foreign")  # "idle", "kernel" apart
# Of two places seen at one address, the worse counts.
_SEVERITY = {"foreign": 0, "torch_compute": 1, "interpreter": 2, "runtime": 3, "idle": 4, "own": 5}
_APART = ("idle", "kernel")  # places outside the shares

# Libraries of the C/C++ runtime, OpenMP, the dynamic loader and libffi (ctypes' calls: a
# kernel-only workspace's binder calls its entry point through it each call), by file name.
_RUNTIME_LIBRARY = re.compile(
    r"^(?:libc|libm|libmvec|libstdc\+\+|libgcc_s|ld-linux[\w.-]*|ld64|libgomp[\w-]*|libiomp5"
    r"|libpthread|libdl|librt|libutil|libatomic|libffi)(?:[.-][\w.-]*)?\.so(?:\.[\d.]+)?$"
)
# torch's own libraries besides libtorch_cpu that do no compute of their own (not its test
# libraries, shipped beside them).
_TORCH_RUNTIME_LIBRARY = re.compile(
    r"^lib(?:c10(?:_cuda)?|torch(?:_python|_global_deps|_cuda)?|shm)\.so(?:\.[\d.]+)?$"
)
# On a GPU: the CUDA driver's and toolkit's libraries (launches, waits, JIT, the profiler), by
# file name, and the packages whose host code launches kernels, by directory.
_CUDA_RUNTIME_LIBRARY = re.compile(
    r"^lib(?:cuda|cudart|nvrtc(?:-builtins)?|nvJitLink|nvjitlink|cupti|nvToolsExt|nvperf_\w+"
    r"|nvidia-[\w-]+|cublas(?:Lt)?|cudnn\w*|cufft\w*|curand|cusparse\w*|cusolver\w*|nccl"
    r"|nvshmem\w*|cufile\w*|caffe2_nvrtc|torch_cuda_linalg)(?:[.-][\w.-]*)?\.so(?:\.[\d.]+)?$"
)
_CUDA_RUNTIME_PACKAGE = re.compile(r"/site-packages/(?:nvidia|triton|cupy|cupy_backends)/")
# ... of which OpenMP's runtimes: their threads' time is mostly waiting at barriers, whoever's
# work they wait for ("idle", outside the shares).
_OPENMP_LIBRARY = re.compile(r"^lib(?:gomp|iomp5)")
# The vendor libraries' namespaces (gloo's and c10d's reductions, tensorexpr's evaluator:
# collective and JIT code no eager forward runs, whose elementwise loops did an add_mul task's
# arithmetic as "runtime", red-team round 37: gloo::sum and gloo::product found in
# libtorch_cpu's .symtab).
_VENDOR_NAMESPACES = (
    r"\b(?:dnnl|ideep|fbgemm|xnnpack|pytorch_qnnp|gloo|c10d)::|\btorch::jit::tensorexpr::"
)
# PyTorch's compute kernels (demangled names): ATen's kernels and per-backend operators, its
# vendor libraries, BLAS and LAPACK names.
_TORCH_COMPUTE = re.compile(
    r"\bat::(?:native|cpu|vec|compositeexplicitautograd\w*|compositeimplicitautograd)::"
    r"|" + _VENDOR_NAMESPACES + r"|^(?:mkl_|MKL_|dnnl_|nnp_|xnn_)"
    r"|^(?:cblas_|LAPACKE_)|^_?[sdczSDCZ](?:gemm|gemv|symm|syrk|trsm|trmm|axpy|dot|scal|ger|gesv"
    r"|getr[fs]|potr[fs]|geqrf|gesdd|syev|GEMM|GEMV|AXPY|DOT|SCAL)\w*$"
)
# ... but not the code of the operators the fallback ban allows (views, copies, fill,
# allocation: an identifier that is such an operator's name, alone or with a suffix, such as
# copy_kernel or empty_cpu), nor ATen's kernel lookup. The parallel-for wrappers around a kernel
# (at::internal::invoke_parallel<...>'s OpenMP bodies) are judged by the kernel they name.
# A suffix naming another operator is not the allowed one's: the backward kernels of views
# (unfold_backward, slice_backward, ...: sums and scatters into a fresh tensor) and sparse
# index arithmetic (flatten_indices) never run in an honest forward (red-team round 35:
# unfold_backward's kernel, found by address, wrote transpose_pad's answer as "runtime").
_NOT_ALLOWED_SUFFIX = r"(?!\w*backward)(?!indices)"
_ALLOWED_NAMES = sorted(
    {name for op in ALLOWED_OPS if len(name := op.removeprefix("aten::").strip("_")) > 2}
    | {
        "t",  # the transpose view (at::native::t), too short for the rule above
        "to",
        "item",
        "direct_copy",
        "copy_same_type",
        "range",
        "linspace",
        "DispatchStub",
        "DispatchStubImpl",
    },
    key=len,
    reverse=True,
)
_TORCH_ALLOWED = re.compile(
    r"(?<![\w])_?(?:" + "|".join(map(re.escape, _ALLOWED_NAMES)) + r")"
    r"(?:_" + _NOT_ALLOWED_SUFFIX + r"\w*)?(?![\w])"
    r"|(?<![\w])check[A-Z_]\w*"  # argument checks (checkInBoundsForStorage, check_size_...)
    r"|(?<![\w])infer\w*Geometry\w*"  # views' shapes (inferSqueezeGeometry, ...)
    r"|^mkl_serv_"  # MKL's service functions (thread counts, allocation), no compute
)


@functools.lru_cache(maxsize=64)
def _segments(path: str) -> tuple[tuple[int, int, int], ...]:
    """(file offset, virtual address, file size) of each loadable segment of an ELF file."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only
                return ()
            (phoff,) = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return ()
    found = []
    for k in range(phnum):
        kind, _, offset, vaddr, _, filesz = struct.unpack_from("<IIQQQQ", table, k * phentsize)
        if kind == 1:  # PT_LOAD
            found.append((offset, vaddr, filesz))
    return tuple(found)


@functools.lru_cache(maxsize=64)
def plt_ranges(path: str) -> tuple[tuple[int, int], ...]:
    """[start, end) virtual addresses of an ELF file's PLT sections (stubs with no symbol)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:
                return ()
            (shoff,) = struct.unpack_from("<Q", head, 40)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 58)
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            sections = [struct.unpack_from("<IIQQQQ", table, k * shentsize) for k in range(shnum)]
            _, _, _, _, names_offset, names_size = sections[shstrndx]
            f.seek(names_offset)
            names = f.read(names_size)
    except (OSError, struct.error, IndexError):
        return ()
    found = []
    for name_at, _, _, address, _, size in sections:
        name = names[name_at : names.find(b"\0", name_at)]
        if name.startswith(b".plt"):
            found.append((address, address + size))
    return tuple(found)


def virtual_address(path: str, file_offset: int) -> int:
    """The ELF virtual address of `file_offset` in the library at `path`."""
    for offset, vaddr, size in _segments(path):
        if offset <= file_offset < offset + size:
            return file_offset - offset + vaddr
    return file_offset


class Symbolizer:
    """Function names of addresses in a library, from its symbol table (binutils' addr2line).

    Names are kept once looked up. One addr2line per library stays running and answers each
    batch as it comes (it flushes its answer to every address it reads): it reads what it needs
    of a large library once (a seventh of a second for libtorch_cpu on the 2-core VM, then
    ~5 ms a batch), not at every check of a judgement. The libraries are PyTorch's (trusted
    files); a server that fails or stalls is stopped and its batch asked of a fresh one.
    """

    BATCH = 256  # addresses written at once: a few KiB, never enough to fill the pipe
    TIMEOUT_S = 120.0

    def __init__(self) -> None:
        self.tool = shutil.which("addr2line")
        self._names: dict[tuple[str, int], str | None] = {}
        self._servers: dict[str, _LineServer] = {}

    def names(self, path: str, addresses: set[int]) -> dict[int, str | None]:
        """{address: demangled function name, or None where there is none}."""
        todo = sorted(a for a in addresses if (path, a) not in self._names)
        for k in range(0, len(todo) if self.tool is not None else 0, self.BATCH):
            batch = todo[k : k + self.BATCH]
            lines = self._ask(path, [f"{a:#x}" for a in batch])
            for n, address in enumerate(batch):
                name = lines[2 * n] if 2 * n < len(lines) else "??"
                self._names[(path, address)] = None if name == "??" else name
        return {a: self._names.get((path, a)) for a in addresses}

    def _ask(self, path: str, queries: list[str]) -> list[str]:
        """addr2line's two lines (function, place) per query; [] if it cannot answer."""
        for _ in range(2):  # a server that died or stalled is replaced once
            server = self._servers.get(path)
            try:
                if server is None:
                    server = _LineServer([self.tool, "-f", "-C", "-e", path])
                    self._servers[path] = server
                return server.ask(queries, 2 * len(queries), self.TIMEOUT_S)
            except (OSError, EOFError, TimeoutError):
                self._servers.pop(path, None)
                if server is not None:
                    server.close()
        return []

    def close(self) -> None:
        """Stop the addr2line processes."""
        for server in self._servers.values():
            server.close()
        self._servers.clear()


class _LineServer:
    """A child that answers lines written to its stdin with lines on its stdout."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.pending = b""

    def ask(self, queries: list[str], lines: int, timeout_s: float) -> list[str]:
        """Write `queries`; the next `lines` lines of the answer (TimeoutError, EOFError)."""
        self.proc.stdin.write(("\n".join(queries) + "\n").encode())
        self.proc.stdin.flush()
        fd, deadline = self.proc.stdout.fileno(), time.monotonic() + timeout_s
        while self.pending.count(b"\n") < lines:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("addr2line did not answer")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError("addr2line exited")
            self.pending += chunk
        *answer, self.pending = self.pending.split(b"\n", lines)
        return [line.decode(errors="replace") for line in answer]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()


def torch_library_dir() -> str | None:
    """The lib/ directory of torch (with a trailing "/"), or None without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    return str(Path(spec.origin).resolve().parent / "lib") + "/"


@dataclass
class Attribution:
    """Forward's sampled CPU time by place (PLACES), and the top names in the bad places."""

    counts: Counter = field(default_factory=Counter)
    where: Counter = field(default_factory=Counter)  # (place, symbol or library) -> samples
    lost: int = 0
    lost_to_others: float = 0.0  # per CPU: of `lost`, the share of others' records (Samples)
    # Bad samples in calls where they are at least CALL_SHARE of the call's: time banked in
    # other calls (own work in a few long ones, say) does not dilute these.
    dominated: int = 0
    between: Counter = field(default_factory=Counter)  # samples between calls, by place
    windows: int = 0  # forward's calls sampled
    first_call: Counter = field(default_factory=Counter)  # the very first call's, by place
    has_first_call: bool = False  # the very first call is among the windows
    first_dominated: int = 0  # of `dominated`, the very first call's
    # After the first call: samples in PyTorch's own code that is not compute (the allowed
    # copy, fill and view ops, dispatch, allocation).
    torch_runtime: int = 0
    # After the first call: samples in torch's Python bindings (libtorch_python): argument
    # parsing, and on a data-movement task's data also `tolist`'s walk over a view's strides.
    torch_python: int = 0
    # After the first call, in calls and between them: samples in Python (the interpreter,
    # torch's Python bindings) on a thread other than its process's main one. The runner runs
    # Python on its main thread only, and the solution may start no Python thread: this is
    # Python that native code of the solution's called from a thread of its own.
    python_off_main: int = 0
    # After the first call, in calls after the runner's "done" (forward had returned): samples
    # in the interpreter and in torch's Python bindings ("torch_python"), the runner's glue
    # handing the outputs over, not forward's.
    handover: Counter = field(default_factory=Counter)
    # Between calls: OpenMP's waits sampled longer after a call's end than its workers spin
    # (OPENMP_SPIN_NS): a core burned in libgomp by threads of the solution's, not a wait.
    late_waits: int = 0

    @property
    def total(self) -> int:
        """Samples inside forward's calls."""
        return sum(self.counts[p] for p in PLACES)

    @property
    def bad(self) -> int:
        """Samples in someone else's compute (torch_compute and foreign)."""
        return self.counts["torch_compute"] + self.counts["foreign"]

    def add(self, other: Attribution) -> None:
        """Count `other`'s samples in this one too."""
        self.counts.update(other.counts)
        self.where.update(other.where)
        self.lost += other.lost
        self.lost_to_others += other.lost_to_others
        self.dominated += other.dominated
        self.between.update(other.between)
        self.windows += other.windows
        self.first_call.update(other.first_call)
        self.has_first_call = self.has_first_call or other.has_first_call
        self.first_dominated += other.first_dominated
        self.torch_runtime += other.torch_runtime
        self.torch_python += other.torch_python
        self.python_off_main += other.python_off_main
        self.handover.update(other.handover)
        self.late_waits += other.late_waits

    def summary(self) -> dict:
        """Counts by place, lost samples and the top bad names (the verdict's flag)."""
        report = {p: self.counts[p] for p in (*PLACES, *_APART)}
        report["lost"] = self.lost
        report["lost_to_others"] = round(self.lost_to_others, 1)
        report["torch_runtime"] = self.torch_runtime
        if self.torch_python:
            report["torch_python"] = self.torch_python
        if self.python_off_main:
            report["python_off_main"] = self.python_off_main
        if self.handover:
            report["python_after_done"] = dict(self.handover)
        if self.late_waits:
            report["late_openmp_waits"] = self.late_waits
        report["in_dominated_calls"] = self.dominated
        report["calls"] = self.windows
        report["first_call"] = {p: self.first_call[p] for p in PLACES if self.first_call[p]}
        between = self.between
        report["between_calls"] = {p: between[p] for p in (*PLACES, *_APART) if between[p]}
        report["top_outside"] = [
            f"{place}: {demangle(name)[:120]} ({n})"
            for (place, name), n in self.where.most_common(5)
        ]
        return report


def file_hashes(extensions_dir: str | None, module_dir: str | None) -> frozenset[str]:
    """SHA-256 of the solution's shared objects the judge built.

    Under `extensions_dir` (built by the build stage, where the solution's code runs when its
    model_new.py imports) only modules laid out as torch's extension builds lay them out
    (`inline_build.is_extension_module`): another library a build left beside them (a copy of
    libtorch_cpu, say) is not the solution's code. Under `module_dir` (kernels/, compiled by
    the judge's plain or torch build, which runs none of it) every shared object.
    """
    found = set()
    for root, every in ((extensions_dir, False), (module_dir, True)):
        if root and Path(root).is_dir():
            for path in Path(root).rglob("*.so"):
                if path.is_file() and not path.is_symlink():
                    if every or is_extension_module(path):
                        found.add(hashlib.sha256(path.read_bytes()).hexdigest())
    return frozenset(found)


class Attributor:
    """Puts samples of one runner in PLACES (see the module doc).

    Args:
        own_hashes: SHA-256 of the shared objects the judge built for the solution: a mapped
            file with one of these contents (read through /proc/PID/map_files, the very file
            mapped) is the solution's.
        writable: Directories the runner can write (its scratch, /tmp, /dev/shm): nothing
            there is trusted as runtime or PyTorch, whatever its name.
        own_dirs: Where the runner itself may build the solution's code (a solution that
            compiles in its runner; Triton's cache): objects there count as its own too, unless
            they copy one of the machine's libraries (`library_index`).
        extension_dirs: Own directories where only torch's extension builds count
            (`NAME/NAME.so`): anything else there (torch.compile's Inductor writes its
            kernels wherever TORCHINDUCTOR_CACHE_DIR points) is foreign.
        library_index: The judge's index file of the machine's libraries
            (cuda_gym.judge.library_copies), read the first time `own_dirs` has an object.
        vendor: The task allows vendor libraries (BLAS, oneDNN): PyTorch's compute counts as
            runtime, only foreign libraries count against the solution.
        device: The runner's device. On "cuda" the CUDA driver and toolkit libraries, the
            NVIDIA wheels, Triton and CuPy are runtime (their host code launches and waits).
        judge_libraries: Libraries of the judge's own that the runner loads (the thread ban's
            callback, cuda_gym.judge.thread_ban): runtime, by exact path.
        moves_data: The task only moves data (the probe's finding): Python's samples count
            with PyTorch's allowed copies against a forward with almost no own code.
    """

    def __init__(
        self,
        own_hashes: frozenset[str] = frozenset(),
        writable: tuple[str, ...] = ("/tmp/", "/dev/shm/"),
        own_dirs: tuple[str, ...] = (),
        extension_dirs: tuple[str, ...] = (),
        vendor: bool = False,
        device: str = "cpu",
        library_index: str | None = None,
        judge_libraries: tuple[str, ...] = (),
        moves_data: bool = False,
    ) -> None:
        self.own_hashes = own_hashes
        self.moves_data = moves_data
        self.judge_libraries = frozenset(judge_libraries)
        self.library_index = library_index
        self.device = device
        self.writable = tuple(d.rstrip("/") + "/" for d in writable)
        self.extension_dirs = tuple(d.rstrip("/") + "/" for d in extension_dirs)
        self.own_dirs = tuple(d.rstrip("/") + "/" for d in own_dirs) + self.extension_dirs
        self.vendor = vendor
        self.torch_lib = torch_library_dir()
        self.python_roots = tuple(
            str(Path(p).resolve()) + "/" for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}
        )
        self.python_exe = str(Path(sys.executable).resolve())
        self._places: dict[tuple[int, Mapping], str] = {}
        self.symbolizer = Symbolizer()

    def place_of_mapping(self, pid: int, m: Mapping) -> str:
        """Where code in mapping `m` of process `pid` counts ("torch": by its symbols)."""
        key = (pid, m)
        if key not in self._places:
            self._places[key] = self._place_of_mapping(pid, m)
        return self._places[key]

    def _place_of_mapping(self, pid: int, m: Mapping) -> str:
        path = m.path
        if path in ("[vdso]", "[vsyscall]"):
            return "runtime"
        if not path.startswith("/"):
            return "foreign"  # anonymous executable memory
        name = Path(path).name
        if path in self.judge_libraries:  # the judge's own code in the runner (thread_ban)
            return "runtime"
        # The system's and this Python's read-only trees first (they may lie under /tmp, as a
        # fresh clone's venv does): what is there is PyTorch, the runtime or foreign, never
        # the solution's, whatever its content.
        if self.torch_lib and path.startswith(self.torch_lib):
            if name.startswith("libtorch_cpu"):
                return "torch"
            if _OPENMP_LIBRARY.match(name):
                return "idle"
            if _TORCH_RUNTIME_LIBRARY.match(name) or self._cuda_runtime(path, name):
                return "runtime"
            return "foreign"
        if path.startswith(_SYSTEM_ROOTS + self.python_roots):
            if _RUNTIME_LIBRARY.match(name):
                return "idle" if _OPENMP_LIBRARY.match(name) else "runtime"
            if self._cuda_runtime(path, name):
                return "runtime"
            if name.startswith("libpython") or path == self.python_exe or "/lib-dynload/" in path:
                return "interpreter"  # with the standard library's extension modules
            return "foreign"
        if self._is_own(pid, m):
            return "own"
        return "foreign"  # a file the runner wrote or brought, not one the judge built

    def _moves_in_python(self, place: str) -> bool:
        """Whether the interpreter's samples are named by function: a data-movement task's."""
        return place == "interpreter" and self.moves_data and self.device == "cpu"

    def _copy_in_forward(self, symbol: str | None) -> bool:
        """Whether PyTorch's function `symbol`, run in forward, is a copy it may not run.

        On a CPU task that only moves data the fallback ban refuses PyTorch's copies in
        forward (`fallback.COPY_OPS`): a copy kernel sampled in a call was reached below the
        dispatcher (red-team round 31: copy_'s redispatch found in libtorch's ELF image and
        called with a raw key set, which no ban sees), before the runner's "done" or after it
        (a thread of the solution's copying while the runner hands the outputs over: the
        runner copies them into the driver's slots with libc's memmove on the CPU).
        """
        if symbol is None or not self.moves_data or self.device != "cpu":
            return False
        return bool(_COPY_KERNEL.search(plain_name(symbol)))

    def _kernel_copies(self, in_forward: bool | None, off_main: bool) -> bool:
        """Whether a kernel sample of a call is judged by what the kernel ran (`_kernel_copy`).

        On a CPU task that only moves data: in forward's time, and after "done" on threads
        other than the runner's (its own messages, its reply, are sent from its main thread).
        """
        if not self.moves_data or self.device != "cpu" or in_forward is None:
            return False
        return in_forward or off_main

    def _cuda_runtime(self, path: str, name: str) -> bool:
        """On a GPU, code whose host time is launching and waiting (a trusted tree's)."""
        if self.device != "cuda":
            return False
        return bool(_CUDA_RUNTIME_LIBRARY.match(name) or _CUDA_RUNTIME_PACKAGE.search(path))

    def _is_own(self, pid: int, m: Mapping) -> bool:
        in_own_dir = bool(self.own_dirs) and m.path.startswith(self.own_dirs)
        if in_own_dir and m.path.startswith(self.extension_dirs):
            in_own_dir = is_extension_module(Path(m.path))
        if in_own_dir and self.library_index is None:
            return True  # no index to check against (the driver always gives one)
        if not (in_own_dir or self.own_hashes):
            return False
        try:
            data = Path(f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}").read_bytes()
        except OSError:
            return False
        if in_own_dir:
            # Built or written by the runner, where the solution's code runs: its own unless
            # it copies a library of the machine's (a BLAS renamed as an extension module).
            index = library_copies.load_index(Path(self.library_index))
            return index is not None and index.copy_of(data) is None
        return hashlib.sha256(data).hexdigest() in self.own_hashes

    def attribute(
        self, samples: Samples, windows: list[tuple], since: int | None = None
    ) -> Attribution:
        """The samples that fall in `windows` ([start, end) CLOCK_MONOTONIC ns), by place.

        A window may say when the runner said "done" (start, end, done): the samples before
        it are forward's own time, the Python after it the runner's (`Attribution.handover`),
        and where a task's copies are refused PyTorch's copy kernels anywhere in such a call
        are foreign (`_copy_in_forward`). With `since`, the samples from then on outside the
        windows (between forward's calls) are counted apart, by place
        (`Attribution.between`).
        """
        out = Attribution(
            lost=samples.lost, lost_to_others=samples.lost_to_others, windows=len(windows)
        )
        if not windows:
            return out
        windows = sorted(windows, key=lambda w: w[0])
        starts = [w[0] for w in windows]
        maps = {pid: sorted(m, key=lambda x: x.start) for pid, m in samples.maps.items()}
        inside = []  # (ip, [(place, mapping)], window) of each sample in a window
        # PyTorch's code, and the interpreter's on a data-movement task: named a library a batch
        named: dict[str, set[int]] = {}
        for ip, pid, tid, at in samples.rows:
            k = bisect.bisect_right(starts, at) - 1
            late = False  # (between calls: long after the last one ended)
            if k < 0 or at >= windows[k][1]:
                if since is None or at < since:
                    continue
                late = k >= 0 and at - windows[k][1] > OPENMP_SPIN_NS
                k = -1  # between calls
            found = [
                (self.place_of_mapping(pid, m), m)
                for m in maps.get(pid, [])
                if m.start <= ip < m.end and ip != KERNEL_IP
            ]
            for place, m in found:
                if (place == "torch" and (not self.vendor or self.moves_data)) or (
                    self._moves_in_python(place)
                ):
                    address = virtual_address(m.path, ip - m.start + m.offset)
                    named.setdefault(m.path, set()).add(address)
            done = windows[k][2] if k >= 0 and len(windows[k]) > 2 else None
            # (True: before "done", forward's own time; False: after it; None: none known)
            in_forward = None if done is None else at < done
            copied = None  # (a kernel sample: the kernel's copy it was in, if judged so)
            if ip == KERNEL_IP and self._kernel_copies(in_forward, tid != pid):
                copied = _kernel_copy(samples.kernel_ips.get((tid, at)))
            inside.append((ip, found, k, tid != pid, in_forward, copied, late))
        names = {path: self.symbolizer.names(path, addresses) for path, addresses in named.items()}
        calls = [[0, 0] for _ in windows]  # [bad, total] of each window
        first = 0 if since is not None and windows[0][0] == since else None
        out.has_first_call = first is not None
        for ip, found, k, off_main, in_forward, copied, late in inside:
            if copied is not None:
                place, name = "foreign", f"the Linux kernel copying data ({copied})"
            elif ip == KERNEL_IP:
                place, name = "kernel", ""
            else:
                place, name = self._worst(ip, found, names, in_forward is not None)
            if off_main and k != first and _in_python(place, found):
                out.python_off_main += 1
            if in_forward is False and k != first and not off_main:
                if place == "interpreter":
                    out.handover["interpreter"] += 1
                elif place == "runtime" and _in_torch_python(found):
                    out.handover["torch_python"] += 1
            if k < 0:
                out.between[place] += 1
                out.late_waits += place == "idle" and late
                continue
            out.counts[place] += 1
            if k == first:
                out.first_call[place] += 1
            if place in ("torch_compute", "foreign"):
                out.where[(place, name)] += 1
                calls[k][0] += 1
            elif place == "runtime" and k != first and any(p == "torch" for p, _ in found):
                out.torch_runtime += 1
            elif place == "runtime" and k != first and _in_torch_python(found):
                out.torch_python += 1
            if place in PLACES:
                calls[k][1] += 1
        dominated = [bad if bad and bad >= CALL_SHARE * total else 0 for bad, total in calls]
        out.dominated = sum(dominated)
        out.first_dominated = dominated[first] if first is not None else 0
        return out

    def _worst(self, ip: int, found: list, names: dict, answered: bool = False) -> tuple[str, str]:
        """The place and name of one sample; of two mappings seen at its address, the worse.

        answered: the sample was taken in a call of forward that said "done" (a call: not a
        profiled one, nor one that failed).
        """
        if not found:
            return "foreign", "code in no mapped file"
        places = []
        for place, m in found:
            name = Path(m.path).name or "anonymous executable memory"
            if self._moves_in_python(place):
                address = virtual_address(m.path, ip - m.start + m.offset)
                symbol = names.get(m.path, {}).get(address)
                if symbol is not None and _PYTHON_DATA_MOVEMENT.match(symbol):
                    place, name = "foreign", f"{name}'s {symbol}{_PYTHON_MOVING}"
            elif place == "torch":
                address = virtual_address(m.path, ip - m.start + m.offset)
                symbol = names.get(m.path, {}).get(address)
                if answered and self._copy_in_forward(symbol):
                    place, name = "foreign", f"{_COPY_IN_FORWARD}: {plain_name(symbol)}"
                elif self.vendor:
                    place = "runtime"
                elif symbol is None and any(lo <= address < hi for lo, hi in plt_ranges(m.path)):
                    place, name = "runtime", f"{name} (PLT)"
                elif symbol is None:
                    place, name = "torch_compute", f"{name} (no symbol)"
                else:
                    place = "torch_compute" if is_torch_compute(symbol) else "runtime"
                    name = symbol
            places.append((place, name))
        # OpenMP's waits are set apart from every rule: never where another file's code was
        # seen too (code mapped where libgomp was, or libgomp's name mapped over other code)
        if any(place != "idle" for place, _ in places):
            places = [pn for pn in places if pn[0] != "idle"]
        return min(places, key=lambda pn: _SEVERITY[pn[0]])


# The Linux kernel's copies between user memory and its buffers (iov_iter), by symbol
# (/proc/kallsyms): what vectored I/O, sockets, pipes and splice copy with.
_KERNEL_DATA_COPY = re.compile(
    r"^(?:_copy_(?:to|from)_iter\w*|copy_page_(?:to|from)_iter\w*|copy_folio_(?:to|from)_iter\w*"
    r"|_?copy_(?:to|from)_user\w*|copy_user_\w+|__copy_user\w*|rep_movs_alternative"
    r"|copy_iovec_from_user|__?import_iovec|iov_iter_\w+|_copy_mc_to_iter|csum_and_copy_\w+"
    r"|skb_copy_datagram_\w+|__skb_datagram_iter|simple_copy_to_iter|\w*splice\w*"
    r"|process_vm_\w+|memcpy_(?:to|from)_iter\w*|copy_to_user_iter\w*|copy_from_user_iter\w*)"
    r"(?:\.\w+)*$"
)


def _kernel_copy(address: int | None) -> str | None:
    """The kernel function of a kernel sample where the kernel copied data, else None.

    The Linux kernel's copies between user buffers (readv/writev through a pipe, sendmsg/recvmsg
    through a socket, splice, process_vm_*: one small iovec per element is a transpose,
    red-team rounds 29 and 33) move a data-movement task's data with no kernel of the
    solution's. Page faults (a fresh output's pages zeroed) are not copies.
    """
    symbol = kernel_symbol(address) if address is not None else None
    return symbol if symbol is not None and _KERNEL_DATA_COPY.match(symbol) else None


# PyTorch's copies (demangled names in libtorch_cpu): the copy kernels and their loops
# (`...VectorizedLoop2d<at::native::AVX2::direct_copy_kernel...>`), copy_'s implementation
# and dispatch, clone's; not a tensor's shallow copy (a view's metadata).
_COPY_KERNEL = re.compile(r"(?<![A-Za-z])(?<!shallow_)_?copy(?:_\w*)?(?![A-Za-z])|\bclone\b")
_COPY_IN_FORWARD = "PyTorch's copy in a call of forward, where the task refuses copies"


# The interpreter's own loops over a sequence's items (extended slicing and slice assignment of
# lists, bytes, bytearrays and strs; joins), by their (static) names in libpython: on a task
# that only moves data they are the movement, on data the solution's code handed to Python
# (red-team round 24: a str, bytes or list copied out of the input by the solution's C++,
# transposed by `ba[j::4] = s[c::C4]` or `v[i:j:C]`; exploit cases python_*_transpose). A stripped
# libpython has no such names and this finds nothing there.
_PYTHON_MOVING = " (Python moving the data)"
_PYTHON_DATA_MOVEMENT = re.compile(
    r"^(?:list_subscript|list_ass_subscript|list_slice|list_extend|bytes_subscript"
    r"|bytearray_subscript|bytearray_ass_subscript|unicode_subscript|bytes_join"
    r"|stringlib_bytes_join|unicode_encode_ucs1"
    # ... and its codecs' loops, through which such data goes between str and C++
    # (pybind11's std::string conversions are UTF-8).
    r"|unicode_decode_utf8|ascii_decode|unicode_fill_utf8|_PyUnicode_FromUCS1"
    r"|\w+lib_utf8_(?:encoder|decode)"
    # ... and the buffer protocol's element loops (a memoryview or buffer with a transpose's
    # strides made contiguous by tobytes(), tolist() or a slice assignment).
    r"|PyBuffer_(?:To|From)Contiguous|buffer_to_contiguous|copy_(?:rec|base|single)"
    r"|_Py_add_one_to_index_[CF]|tolist_(?:rec|base)|unpack_single|pack_single"
    r")(?:\.\w+)*$"  # (GCC's .isra.0, .part.0, ...)
)


class CpuWatch:
    """Samples one runner from outside while forward runs, and says where the time went.

    `window()` brackets a call of forward (`timed`: the sampler's thread then leaves the driver
    alone until it returns); `check()` attributes what was sampled in the windows so far and
    returns the violations they show. Raises PerfUnavailable from the start.

    On the CPU it also reads the runner's whole CPU time, user and kernel, from /proc: after
    `loaded()`, what the runner's processes spend outside forward's calls is work no call
    asked for (the sampler sees user space only, and a thread that burns kernel time, mapping
    and unmapping memory while the driver waits for the device, slows whoever times then).

    Samples are placed by the file an address was mapped from, and the solution's own files are
    checked (built by the judge, no library copied in); the code in memory must be that file's.
    A thread of the watch compares them (`runtime.process_memory`) from `loaded()` on: while every
    untimed call runs and a random share of the timed ones, and at every `check()`. Code
    changed in memory (a library's code copied over the solution's own functions, put back
    before each call returns) is `foreign_kernels`.
    """

    def __init__(
        self,
        pid: int,
        attributor: Attributor | None,
        period_ns: int = PERIOD_NS,
        device: str = "cpu",
    ) -> None:
        self.sampler: PerfSampler | None = None
        # How: on the CPU per CPU, re-armed (short-lived threads are seen, ticks cannot be
        # foreseen), per thread where the kernel refuses that; on a GPU per thread. The
        # baselines' runners alike, keeping nothing: sampled only so that both sides of a
        # speedup pay the same cost (the re-arming process's CPU time included).
        self.sampling = "per-thread"
        keep = attributor is not None
        if device == "cpu" and samples_per_cpu():
            try:
                self.sampler = PerfSampler(
                    pid, period_ns=period_ns, keep=keep, per_cpu=True, rearm=True
                )
                self.sampling = "per-cpu"
            except PerfUnavailable as exc:
                self.sampling = f"per-thread (per-CPU sampling refused: {exc})"
        if self.sampler is None:
            self.sampler = PerfSampler(pid, period_ns=period_ns, keep=keep)
        self.attributor = attributor
        self.total = Attribution()
        self._windows: list[tuple[int, int, int | None]] = []  # (start, end, "done")
        self._since: int | None = None  # the first call's start
        self.pid = pid
        self._accounts = attributor is not None and device == "cpu"
        self._loaded_s: float | None = None
        self._in_calls_s = 0.0
        self._in_calls_user_s = 0.0
        self._period_s = period_ns / 1e9
        self.outside_s: float | None = None  # CPU seconds outside the calls, at the last check
        self.openmp_waits_s = 0.0  # ... of which OpenMP's waits, as excused (at the last check)
        self.cores = _cores_of(pid)  # (OpenMP's workers: one a core it may run on)
        # User-mode CPU seconds in the calls (/proc) and how much of it no sample saw
        self.in_calls_user_s: float | None = None
        self.in_calls_cpu_s: float | None = None  # user and kernel
        self.unsampled_s: float | None = None
        self.mean_period_ms: float | None = None  # what a sample stood for (at the last check)
        self.code_changed: set[str] = set()  # own files whose code differs in memory
        # any files whose executable mappings hold written pages (on the CPU: `check_written`)
        self.code_written: set[str] = set()
        self.code_checks = 0  # comparisons of own code with its file that could be made
        # per CPU on the CPU: files whose code one process mapped at two addresses
        self.code_remapped: set[str] = set()
        self._code_lock = threading.Lock()
        self._watch_code = False
        self._own_maps: list[tuple[int, Mapping, tuple[bytes, ...]]] = []
        self._durations: list[float] = []  # seconds of the untimed windows
        # per CPU: the spans of each call's two reads of /proc, the samples taken in them
        self._accounting: list[tuple[int, int]] = []
        self._accounted = 0
        self._in_calls_ns = 0  # per CPU: the same as _in_calls_s, to the nanosecond
        self._rng = random.Random()

    def loaded(self) -> None:
        """The runner has loaded the solution: its CPU time outside calls counts from now."""
        if self._accounts:
            self._loaded_s = tree_cpu_s(self.pid)
        self._watch_code = self.attributor is not None
        self.check_code()

    def check_code(self, rescan: bool = True) -> None:
        """Compare the executable mappings of the solution's own code with their files now.

        rescan: read the processes' maps again (else the own mappings found last time).
        """
        if not self._watch_code:
            return
        if rescan:
            self.check_written()
        with self._code_lock:
            if rescan:
                known = {(pid, m): d for pid, m, d in self._own_maps}
                self._own_maps = []
                for pid in process_tree(self.pid):
                    for m in executable_maps(pid):
                        if not m.path.startswith("/"):
                            continue
                        if self.attributor.place_of_mapping(pid, m) != "own":
                            continue
                        digests = known.get((pid, m)) or file_digests(pid, m)
                        if digests is not None:
                            self._own_maps.append((pid, m, digests))
            for pid, m, digests in self._own_maps:
                if m.path in self.code_changed:
                    continue
                intact = memory_matches(pid, m, digests)
                if intact is not None:
                    self.code_checks += 1
                if intact is False:
                    self.code_changed.add(m.path)

    def check_written(self) -> None:
        """On the CPU, look for written pages in any file's executable mappings of the runner.

        Only the solution's own code is compared with its file byte by byte; another library's
        code copied over a trusted library's (a runtime library's private mapping made
        writable) would have its samples placed as that library's. A written page stays the
        process's own until the mapping goes (`runtime.process_memory.written_code`; reading
        smaps walks the process's page tables: ~20 ms for a runner with PyTorch loaded).
        """
        if self._watch_code and self._accounts:
            for pid in process_tree(self.pid):
                self.code_written |= written_code(pid)

    @contextlib.contextmanager
    def _code_watched(self, timed: bool):
        """Compare own code with its file while the block runs.

        All through an untimed call; in a random share of the timed ones, once, at a random
        moment of a typical call (the comparison reads memory the runner may be using).
        """
        if not self._watch_code or (timed and self._rng.random() >= CODE_CHECK_TIMED_SHARE):
            yield
            return
        stop = threading.Event()
        typical = sorted(self._durations)[len(self._durations) // 2] if self._durations else 0

        def watch() -> None:
            if timed:
                if not stop.wait(self._rng.uniform(0.0, typical)):
                    self.check_code(rescan=False)
                return
            self.check_code(rescan=False)
            # once through the call, at a random moment of a typical one: written code pages
            written_at = time.monotonic() + self._rng.uniform(0.0, typical)
            while not stop.wait(CODE_CHECK_EVERY_S):
                self.check_code(rescan=False)
                if written_at is not None and time.monotonic() >= written_at:
                    self.check_written()
                    written_at = None

        thread = threading.Thread(target=watch, name="own-code-check", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    @contextlib.contextmanager
    def window(self, timed: bool = False, done=None):
        """Count the samples taken while the block runs (one call of forward).

        done: called when the block ends, when the runner said "done" (forward returned;
        CLOCK_MONOTONIC ns) or None: the samples before it are forward's, those after the
        runner's steps that hand its outputs over (`Attributor.attribute`).
        """
        read_at = time.monotonic_ns()
        before = tree_cpu_times(self.pid) if self._loaded_s is not None else None
        precise = before is not None and self.sampling == "per-cpu"
        before_ns = tree_cpu_ns(self.pid) if precise else 0
        if timed:
            self.sampler.quiet(True)
        start = time.monotonic_ns()
        if self._since is None:
            self._since = start
        try:
            with self._code_watched(timed):
                yield
        finally:
            end = time.monotonic_ns()
            self._windows.append((start, end, done() if done is not None else None))
            if not timed:
                self._durations.append((end - start) / 1e9)
            if timed:
                self.sampler.quiet(False)
            if before is not None:
                user, total = tree_cpu_times(self.pid)
                self._in_calls_user_s += user - before[0]
                self._in_calls_s += total - before[1]
                if precise:  # (to the nanosecond: what the samples are compared with)
                    self._in_calls_ns += tree_cpu_ns(self.pid) - before_ns
                # the span of the two reads: what the runner's tree ran between them (OpenMP's
                # workers waiting after the call, a driver slow to read on a busy machine)
                self._accounting.append((read_at, time.monotonic_ns()))

    def foreign_seen(self) -> bool:
        """Whether a sample so far (at the last `check`) was in someone else's compute."""
        return self.total.bad > 0

    def samples_after_first(self) -> int:
        """Samples attributed so far (at the last `check`) in forward's calls after its first."""
        first = self.total.first_call
        return self.total.total - sum(first[p] for p in PLACES)

    def check(self, own_calls: int = 0, reference_ms: float | None = None) -> list[str]:
        """Attribute the samples so far; the violations they show (`assess`).

        own_calls: how many times one forward calls the solution's own compiled functions.
        reference_ms: the task's reference forward, as the judge timed it (see `assess`).
        """
        samples = self.sampler.collect()
        if self.attributor is None:  # sampled for fairness only (a baseline)
            return []
        self.total.add(self.attributor.attribute(samples, self._windows, self._since))
        if self._accounts and self.sampling == "per-cpu":
            self.code_remapped |= remapped_code(samples.images)
            self._accounted += _inside(samples.rows, self._accounting)
        self._windows, self._accounting = [], []
        who = self.attributor
        found = assess(
            self.total, who.device, own_calls, who.vendor, who.moves_data, reference_ms, self.cores
        )
        self.check_code()
        if self.code_remapped:
            names = ", ".join(sorted(Path(p).name for p in self.code_remapped))
            found.append(
                format_violation(
                    ViolationKind.FOREIGN_KERNELS,
                    f"the code of {names} was mapped at a second address while the solution ran"
                    " (a copy of a library's code to run as if from elsewhere)",
                )
            )
        if self.code_written - self.code_changed:
            names = ", ".join(sorted(Path(p).name for p in self.code_written - self.code_changed))
            found.append(
                format_violation(
                    ViolationKind.FOREIGN_KERNELS,
                    f"code mapped from {names} was written in memory while the solution ran:"
                    " what ran there is not that file's code",
                )
            )
        if self.code_changed:
            names = ", ".join(sorted(Path(p).name for p in self.code_changed))
            found.append(
                format_violation(
                    ViolationKind.FOREIGN_KERNELS,
                    f"the solution's own code ({names}) was changed in memory after it was "
                    "loaded: what ran is not the code that was built and checked",
                )
            )
        if self._loaded_s is not None:
            sampled = self.total.total + sum(self.total.counts[place] for place in _APART)
            self.in_calls_user_s = self._in_calls_user_s
            self.in_calls_cpu_s = self._in_calls_s
            self.mean_period_ms = self.sampler.mean_period_ns() / 1e6
            # Per CPU the kernel is sampled too, and each sample stands for the mean time
            # between two ticks of the re-armed timers: all of forward's CPU time is compared.
            # Records lost there (a CPU's ring full) count as seen only in proportion to the
            # records of others read beside them: a storm of threads that fills the rings
            # must not hide the runner's work, nor another process's storm reject it. Per
            # thread user mode only, at the fixed period, and every lost sample was the runner's.
            if self.sampling == "per-cpu":  # (every sample between the two reads of /proc)
                seen = self._accounted + self.total.lost_to_others
                seen_s = seen * self.mean_period_ms / 1e3
                self.in_calls_cpu_s = self._in_calls_ns / 1e9
                self.unsampled_s = max(0.0, self.in_calls_cpu_s - seen_s)
            else:
                seen_s = (sampled + self.total.lost) * self._period_s
                self.unsampled_s = max(0.0, self._in_calls_user_s - seen_s)
            # Per thread, the share is of the time outside the solution's own code: own code
            # spinning beside the unseen work must not dilute it. Per CPU, of all of it.
            if self.sampling == "per-cpu":
                share_of_s = UNSAMPLED_SHARE_PER_CPU * self.in_calls_cpu_s
            else:
                own_s = self.total.counts["own"] * self._period_s
                share_of_s = UNSAMPLED_SHARE * (self._in_calls_user_s - own_s)
            floor_s = UNSAMPLED_MIN_S_PER_CPU if self.sampling == "per-cpu" else UNSAMPLED_MIN_S
            if self.unsampled_s >= floor_s and self.unsampled_s >= share_of_s:
                per_cpu = self.sampling == "per-cpu"
                compared_s = self.in_calls_cpu_s if per_cpu else self._in_calls_user_s
                unseen = (
                    "threads it could not follow"
                    if self.sampling == "per-cpu"
                    else f"threads that end before {PERIOD_NS / 1e6:.0f} ms of CPU time each"
                )
                found.append(
                    format_violation(
                        ViolationKind.FOREIGN_KERNELS,
                        f"{self.unsampled_s:.2f} s of forward's {compared_s:.2f} s of"
                        f" CPU time ran where the judge's sampler saw none of it ({unseen}):"
                        " whose compute it was cannot be told; keep worker threads alive across"
                        " calls (OpenMP, at::parallel_for, a pool)",
                    )
                )
            self.outside_s = max(0.0, tree_cpu_s(self.pid) - self._loaded_s - self._in_calls_s)
            waits_s = self.total.between["idle"] * (
                self.mean_period_ms / 1e3 if self.sampling == "per-cpu" else self._period_s
            )
            allowed_s = OPENMP_WAIT_S_PER_CALL * self.cores * self.total.windows
            self.openmp_waits_s = min(waits_s, allowed_s)
            if self.outside_s - self.openmp_waits_s >= OUTSIDE_CALLS_CPU_S:
                found.append(
                    format_violation(
                        ViolationKind.ASYNC_WORK,
                        f"the solution's processes used {self.outside_s:.1f} s of CPU time (user"
                        f" and kernel) outside forward's calls, {self.openmp_waits_s:.1f} s of it"
                        " OpenMP's waits: no work may run outside a call (it slows other"
                        " judgements)",
                    )
                )
        return found

    def close(self) -> None:
        """Stop sampling (and the attributor's symbol lookups)."""
        self.sampler.close()
        if self.attributor is not None:
            self.attributor.symbolizer.close()


def _cores_of(pid: int) -> int:
    """How many CPU cores process `pid` may run on (2 where that cannot be read)."""
    try:
        return max(1, len(os.sched_getaffinity(pid)))
    except OSError:
        return 2


def _inside(rows: list, spans: list[tuple[int, int]]) -> int:
    """How many samples (ip, pid, tid, time) fall in one of `spans` ([start, end] ns)."""
    spans = sorted(spans)
    starts = [a for a, _ in spans]
    count = 0
    for row in rows:
        k = bisect.bisect_right(starts, row[3]) - 1
        count += k >= 0 and row[3] <= spans[k][1]
    return count


def remapped_code(images: dict) -> set[str]:
    """Files whose code (the same offset of the file) one process image mapped at two addresses.

    images: {(pid, execs before) or pid: its executable mappings} (`Samples.images`). A library
    is mapped once in an image (an exec maps the C library anew, elsewhere: a new image); a
    second mapping of its code, moved or swapped to where another file's code was seen
    (`PerfSampler` records each mapping as it is made, but a move, mremap, makes no record),
    would be placed as the other file's.
    """
    found = set()
    for mappings in images.values():
        starts: dict[tuple[str, int], set[int]] = {}
        for m in mappings:
            if m.path.startswith("/"):
                starts.setdefault((m.path, m.offset), set()).add(m.start)
        found |= {path for (path, _), at in starts.items() if len(at) > 1}
    return found


def plain_name(symbol: str) -> str:
    """A symbol demangled, without the compiler's "[clone .isra.0]"-style suffixes."""
    return re.sub(r"\s*\[clone [^\]]*\]", "", demangle(_GCC_SUFFIX.sub("", symbol)))


@functools.lru_cache(maxsize=4096)
def is_torch_compute(symbol: str) -> bool:
    """Whether a libtorch_cpu symbol (mangled or not) is one of PyTorch's compute kernels."""
    name = plain_name(symbol)  # (without "[clone .isra.0]": "clone" is an allowed op)
    if name.startswith("_Z"):  # c++filt could not demangle it: read the mangled name
        return bool(_MANGLED_COMPUTE.search(name)) and not _mangled_allowed(name)
    if "::" not in name and "(" not in name:  # a C symbol: a vendor library's
        return not _PLAIN_RUNTIME.match(name)
    if _VENDOR_COMPUTE.search(name):  # an allowed op's name there is its own (transpose_simd)
        return True
    return bool(_TORCH_COMPUTE.search(name)) and not _TORCH_ALLOWED.search(name)


_VENDOR_COMPUTE = re.compile(_VENDOR_NAMESPACES)


# libtorch_cpu's C symbols (no C++ name) are the vendor libraries linked into it: MKL's BLAS,
# sparse, DFT and VML kernels (many without its prefix: xbsr_gnxn_row_mv_def_ker, owngDFT...,
# gemm_batch_internal..., its assembly's labels), QNNPACK, ... all compute, but for Sleef's
# vector math (what ATen's inline vector code, compiled into an extension, calls: the
# solution's own math, as libm's is) and these, which compute nothing of a call's.
_PLAIN_RUNTIME = re.compile(
    r"^(?:Sleef_|mkl_serv_|pthreadpool_|cpuinfo_|aoti_torch_|mz_|__intel_|__itt|__tcf_"
    r"|_GLOBAL__sub_I|__cxa_|_init$|_fini$)"
)


# The compute namespaces of _TORCH_COMPUTE as a mangled name spells them (length-prefixed).
# (`at` itself may be a substitution, `S_` or `S0_`, after its first use in the name)
_MANGLED_COMPUTE = re.compile(
    r"(?:2at|S[0-9A-Z]*_)(?:6native|3cpu|3vec|28compositeexplicitautograd"
    r"|27compositeimplicitautograd)|4dnnl|5ideep|6fbgemm|7xnnpack|12pytorch_qnnp|4gloo|3c10d"
    r"|10tensorexpr"
)
_MANGLED_NAME = re.compile(
    r"(\d+)(_?(?:" + "|".join(map(re.escape, _ALLOWED_NAMES)) + r")(?:_[A-Za-z0-9_]*)?)"
)


# Fewer samples than this in libpython's sequence loops (_PYTHON_DATA_MOVEMENT) are the
# runner's or forward's own list handling, not the task's data: they do not make up the
# CPU_BAD_MIN of a fast honest kernel's few samples (legit_transpose_pad_kernel: 3 own samples
# in 181 calls, none there; round 24's cases 13-19 and more).
PY_MOVED_MIN = 6


def _stray_python_moves(attribution: Attribution) -> int:
    """Samples in libpython's sequence loops when they are too few to be the task's movement."""
    moved = sum(
        n for (place, name), n in attribution.where.items() if name.endswith(_PYTHON_MOVING)
    )
    return moved if moved < PY_MOVED_MIN else 0


def _in_python(place: str, found: list) -> bool:
    """Whether a sample ran Python: the interpreter, or torch's Python bindings."""
    return place == "interpreter" or _in_torch_python(found)


def _in_torch_python(found: list) -> bool:
    """Whether a sample's mappings include torch's Python bindings (libtorch_python)."""
    return any(Path(m.path).name.startswith("libtorch_python") for _, m in found)


def _mangled_allowed(name: str) -> bool:
    """Whether a mangled name holds an identifier that _TORCH_ALLOWED allows."""
    for match in _MANGLED_NAME.finditer(name):
        length, text = int(match.group(1)), match.group(2)
        if len(text) >= length and _TORCH_ALLOWED.fullmatch(text[:length]):
            return True
    return False


def assess(
    attribution: Attribution,
    device: str = "cpu",
    own_calls: int = 0,
    vendor: bool = False,
    moves_data: bool = False,
    reference_ms: float | None = None,
    cores: int = 2,
) -> list[str]:
    """The violations an attribution shows: `foreign_kernels`, `async_work` (or none).

    On "cuda" also `no_own_kernel` when the solution's own host code does the work (beyond
    its glue: pybind11's dispatch and argument checks of each of forward's `own_calls`).
    `vendor`: the task allows vendor libraries (PyTorch's GEMMs count as its runtime there, so
    the CPU's rule against work done by allowed copies does not apply). `reference_ms`: the
    reference's forward (trusted: the driver's own measure), which bounds the Python a call's
    own work can excuse on the CPU.
    """
    found = []
    if attribution.python_off_main >= PYTHON_OFF_MAIN_SAMPLES:
        found.append(
            format_violation(
                ViolationKind.FOREIGN_KERNELS,
                f"Python ran on a thread the solution's native code started"
                f" ({attribution.python_off_main} samples after forward's first call): calls"
                " back into Python (PyTorch's API, say) from a thread no ban covers; its own"
                " kernels must do the work",
            )
        )
    first = attribution.first_call
    after_first = attribution.total - sum(first[p] for p in PLACES)
    total, bad, dominated = attribution.total, attribution.bad, attribution.dominated
    if device == "cuda":
        # A GPU solution's first call may compile (Triton builds its launcher with the system's
        # C compiler and hashes its sources; NVRTC, CuPy): those are not forward's compute.
        total = after_first
        bad -= first["torch_compute"] + first["foreign"]
        dominated -= attribution.first_dominated
    if total and (
        (bad >= MIN_SAMPLES and bad >= MAX_SHARE * total)
        or dominated >= MIN_SAMPLES
        or (device == "cpu" and bad >= CPU_BAD_SAMPLES)
        or (
            device == "cpu"
            and bad - _stray_python_moves(attribution) >= CPU_BAD_MIN
            and (moves_data or bad >= CPU_BAD_OWN_SHARE * attribution.counts["own"])
        )
    ):
        top = ", ".join(
            f"{place}: {demangle(name)[:120]} {100 * n / total:.0f}%"
            for (place, name), n in attribution.where.most_common(3)
        )
        found.append(
            format_violation(
                ViolationKind.FOREIGN_KERNELS,
                f"{100 * bad / total:.0f}% of forward's sampled CPU time ({bad} samples, "
                f"{dominated} in calls where they are a quarter or more of the "
                f"call's) ran in compute that is not the solution's ({top}); its own code must "
                "do the work",
            )
        )
    # Work done by PyTorch's allowed ops alone (a data-movement task's copies and fills), with a
    # call of the solution's own function only for show.
    own_after = attribution.counts["own"] - first["own"]
    moved = attribution.torch_runtime
    if moves_data:
        # On a task that only moves data Python moves it too: libpython's buffer copies (a
        # strided Py_buffer filled in Fortran order is a transpose: red-team round 16).
        moved += attribution.counts["interpreter"] - first["interpreter"]
    if (
        device == "cpu"
        and not vendor  # (there PyTorch's GEMMs count as its runtime too, and are allowed)
        and after_first >= MOVE_MIN_SAMPLES
        and moved >= MOVE_SHARE * after_first
        and own_after <= OWN_MIN_SHARE * after_first
    ):
        found.append(
            format_violation(
                ViolationKind.NO_OWN_KERNEL,
                f"{100 * moved / after_first:.0f}% of forward's sampled CPU time after its first"
                f" call ran in PyTorch's allowed copy, fill and view ops"
                f"{' or in Python' if moves_data else ''} and"
                f" {100 * own_after / after_first:.0f}% in the solution's own code: its own"
                " kernels must do the work",
            )
        )
    # The first call aside: one-time work of forward's (a table built lazily in Python) is there.
    # (not the runner's after "done", handing the outputs over: red-team round 31's honest
    # transpose was rejected at ~2.9 ms a call with it, on a host at load 5)
    python = attribution.counts["interpreter"] - first["interpreter"]
    python -= attribution.handover["interpreter"]
    calls = attribution.windows - attribution.has_first_call
    own_ms = own_after * PERIOD_NS / 1e6 / max(1, calls)
    python_ms = PY_MS_PER_CALL
    moves_on_cpu = device == "cpu" and moves_data
    if moves_on_cpu:
        # Python moving the task's data: its interpreter and torch's bindings (a view's
        # `tolist` reached from C++: red-team round 25) together, against a smaller budget.
        python += attribution.torch_python - attribution.handover["torch_python"]
    if device == "cpu":
        # A Python loop around many calls of its own functions may take more, but no more than
        # those calls' own work: empty calls of its own (the count comes from one call, which
        # C++ can tell by its profile hook) buy none. (Honest time loop, rnn_python_time_loop:
        # 15 ms of Python, 33 ms own per call.) (On a GPU such own host code is
        # `no_own_kernel` below.)
        allowance = min(PY_MS_PER_OWN_CALL * own_calls, PY_OWN_BACKING * own_ms)
        factor = PY_MOVES_REFERENCE_FACTOR if moves_on_cpu else PY_REFERENCE_FACTOR
        if reference_ms is not None:
            allowance = min(allowance, factor * reference_ms)
        python_ms = max(PY_MOVES_MS_PER_CALL if moves_on_cpu else PY_MS_PER_CALL, allowance)
    per_call_ms = python * PERIOD_NS / 1e6 / max(1, calls)
    # On a GPU also most of the time after the first call (the CUDA libraries' launches run
    # beside forward's Python); on the CPU the time per call alone, as its samples show it at
    # the least (`_at_least`: an honest time loop read 20.9 ms of Python a call against its
    # 20.9 ms from 49 samples in a census of 5 calls, two judgements on the 2-core VM).
    shared = device == "cpu" or python >= PY_SHARE * after_first
    python_low_ms = _at_least(python) * PERIOD_NS / 1e6 / max(1, calls)
    if python >= PY_MIN_SAMPLES and shared and python_low_ms >= python_ms:
        found.append(
            format_violation(
                ViolationKind.FOREIGN_KERNELS,
                f"~{per_call_ms:.1f} ms of CPU time per call after forward's first"
                f" ({python} samples, {100 * python / max(1, after_first):.0f}% of its sampled"
                f" time) ran in the Python interpreter, over the {python_ms:.1f} ms its glue"
                " may take: the work was done by Python code, not by a kernel; its own compiled"
                " code must do it",
            )
        )
    glue_ms = max(HOST_MS_PER_CALL, HOST_MS_PER_OWN_CALL * own_calls)
    # (as the samples show it at the least: an honest time loop of 1,024 launches a call, 26
    # samples in a census of 5 calls on a busy H100, read 11.1 ms against its 10.24 ms)
    own_low_ms = _at_least(own_after) * PERIOD_NS / 1e6 / max(1, calls)
    if device == "cuda" and own_after >= HOST_MIN_SAMPLES and own_low_ms >= glue_ms:
        found.append(
            format_violation(
                ViolationKind.NO_OWN_KERNEL,
                f"the solution's own host code ran ~{own_ms:.1f} ms of CPU time per call after"
                f" the first ({own_after} samples; its glue for {own_calls} calls of its functions"
                f" takes under {glue_ms:.2f} ms): the work was done on the CPU, not by its GPU"
                " kernels",
            )
        )
    # On a GPU the runner polls for the driver's next call (a timing loop) in its own Python
    # and the CUDA libraries: only the solution's code and foreign compute count there. On the
    # CPU it waits asleep: all but OpenMP's waits count.
    idle = (*_APART, "runtime", "interpreter") if device == "cuda" else ("idle",)
    working = sum(n for place, n in attribution.between.items() if place not in idle)
    spinning = 0
    if device == "cpu":  # (OpenMP's waits beyond what a call's end leaves spinning)
        waits = OPENMP_WAIT_S_PER_CALL * cores * attribution.windows / (PERIOD_NS / 1e9)
        early = attribution.between["idle"] - attribution.late_waits
        spinning = attribution.late_waits + max(0, early - int(waits))
        working += spinning
    if working >= BETWEEN_SAMPLES:
        places = ", ".join(
            f"{place} {n}" for place, n in attribution.between.most_common() if place not in idle
        )
        if spinning:
            places += f"{', ' if places else ''}OpenMP's waits {spinning} past their allowance"
        found.append(
            format_violation(
                ViolationKind.ASYNC_WORK,
                f"the solution's process kept computing between forward's calls (~"
                f"{working * PERIOD_NS / 1e6:.0f} ms of CPU time sampled outside them: "
                f"{places}): no work may run outside a call (it slows other judgements)",
            )
        )
    return found


def _at_least(samples: int) -> float:
    """The fewest samples a time sampled as `samples` could well have given: two sigmas below.

    A sample count is uncertain by its square root, and a census is often a few calls: a
    per-call time compared with a budget is compared as the samples show it at the least.
    """
    return max(0.0, samples - 2 * math.sqrt(samples))


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """A C++ symbol demangled (c++filt); the name itself if it is not mangled.

    GCC's suffixes on local copies (`._omp_fn.0`, `.isra.0`, `.constprop.0`, `.cold`, ...) go
    first: c++filt leaves a name with some of them mangled.
    """
    if not name.startswith("_Z") or shutil.which("c++filt") is None:
        return name
    base = _GCC_SUFFIX.sub("", name)
    proc = subprocess.run(["c++filt", base], capture_output=True, text=True, timeout=10)
    return proc.stdout.strip() or name


_GCC_SUFFIX = re.compile(r"(?:\.(?:_omp_fn|isra|constprop|part|cold|lto_priv|localalias)[.\d]*)+$")
