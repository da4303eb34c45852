"""What every trusted worker role shares: its progress reporter, the device gate, numerics.

The roles (cuda_gym.judge.worker dispatches them): `build` (cuda_gym.judge.build), `probe`
(cuda_gym.judge.probe) and `candidate` (cuda_gym.judge.driver, which serves the candidate's
untrusted runner). Each writes its stage to `<result_path>.stage` and its result to
`result_path`, where the judge reads them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import resource
import sys
import time
import traceback
from pathlib import Path

from cuda_gym.runtime.perf_sampling import tree_cpu_s

STAGE_FILE_SUFFIX = ".stage"


class Reporter:
    """Writes the worker's progress (stage) and final result where the parent reads them."""

    def __init__(self, result_path: str) -> None:
        self.result_path = Path(result_path)
        self.stage_path = self.result_path.with_suffix(STAGE_FILE_SUFFIX)
        self.stage = "start"
        self.why: str | None = None  # what the current stage waits for (stage "gate")
        self.started = time.monotonic()
        self.stage_s: dict[str, float] = {}
        # Host CPU seconds by stage: this worker, its runners and compilers, live or reaped.
        self.stage_cpu_s: dict[str, float] = {}
        # Runners the fork server started for this worker: not in its process tree, counted
        # by the most CPU time each was seen with (a forked process starts at none).
        self._followed: dict[int, float] = {}
        self.cpu_started = self._cpu()

    def follow(self, pid: int) -> None:
        """Count the CPU time of process `pid` (and its tree) as this worker's from now on."""
        self._followed[pid] = tree_cpu_s(pid)
        self.cpu_started -= self._followed[pid]  # (only what it spends from now on counts)

    def _cpu(self) -> float:
        for pid, seen in self._followed.items():
            self._followed[pid] = max(seen, tree_cpu_s(pid))
        return tree_cpu_s(os.getpid()) + sum(self._followed.values())

    def enter(self, stage: str, why: str | None = None) -> None:
        """Close the current stage and enter `stage`.

        `why`: what the stage is for, its time also kept apart as "<stage>.<why>" (the waits
        for the gate: "entry" at the start, "step" for timers between correctness steps,
        "alone" to time, "back" to take a shared hold back).
        """
        self._close_stage()
        self.stage, self.why = stage, why
        self.stage_path.write_text(stage)
        if _GATE is not None:
            _GATE.note("stage", f"{stage}.{why}" if why else stage)

    def _close_stage(self) -> None:
        now = time.monotonic()
        self.stage_s[self.stage] = round(self.stage_s.get(self.stage, 0.0) + now - self.started, 4)
        if self.why is not None:
            key = f"{self.stage}.{self.why}"
            self.stage_s[key] = round(self.stage_s.get(key, 0.0) + now - self.started, 4)
        self.started = now
        cpu = self._cpu()
        spent = self.stage_cpu_s.get(self.stage, 0.0) + cpu - self.cpu_started
        self.stage_cpu_s[self.stage] = round(spent, 3)
        self.cpu_started = cpu

    def finish(self, result: dict) -> None:
        """Write `result` (a dict) with the stage, stage times and peak memory added."""
        self._close_stage()
        result.setdefault("stage", self.stage)
        result.setdefault("stage_s", self.stage_s)
        result.setdefault("stage_cpu_s", self.stage_cpu_s)
        result.setdefault("device_peak", device_peak())
        result.setdefault("cpu_s", cpu_seconds() + sum(self._followed.values()))
        tmp = self.result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(self.result_path)


def cpu_seconds() -> float:
    """Host CPU seconds of this worker and the children it waited for (its runners, compilers)."""
    mine = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime
    return round(total, 3)


def device_peak() -> dict | None:
    """The most GPU memory PyTorch's allocator held in this process, or None.

    "allocated": bytes in tensors; "reserved": bytes taken from the driver (what other processes
    lose). None where the process never used CUDA. The CUDA context (some hundred MiB) is not
    counted.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
        return {
            "allocated": int(torch.cuda.max_memory_allocated()),
            "reserved": int(torch.cuda.max_memory_reserved()),
        }
    except Exception:  # a broken CUDA state: the result matters more than this figure
        return None


# CU_CTX_SCHED_BLOCKING_SYNC: a synchronize sleeps until the GPU is done instead of spinning.
_SCHED_BLOCKING_SYNC = 0x4


def sleep_on_gpu_waits(device: str) -> bool:
    """CUDA: make this worker's waits for its GPU sleep, before its context is made; whether set.

    A worker times nothing by waiting on the device itself (the runner's "done" stops a timed
    call's clock; GPU times are events), but it synchronises around every correctness call, and
    a default context spins a core for each whole wait: with the judges of a GPU sharing it,
    seconds of host CPU per judgement (benchmarks/results/process_cpu_h100.json). Sets the
    primary context's flags through the driver API before PyTorch creates it; False (waits
    spin, as before) where the driver refuses.
    """
    if device != "cuda":
        return False
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        handle = ctypes.c_int(0)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(handle), 0) != 0:
            return False
        return cuda.cuDevicePrimaryCtxSetFlags(handle, _SCHED_BLOCKING_SYNC) == 0
    except (OSError, AttributeError):
        return False


# This worker's DeviceGate (cuda_gym.runtime.device_gate), when the judge asked for one: held
# shared for the worker's whole device work, alone while it times or profiles.
_GATE = None
# Its MemoryLedger and the bytes its estimate asks for, on CUDA: the whole estimate is held
# inside the gate and taken there (`_take_memory`); between the trials it keeps only its base.
_LEDGER = None
_WANTED = 0


def open_gate(header, rep: Reporter):
    """Enter the device's gate (shared) if `header` (a WorkerHeader) asks for it; a context.

    On CUDA with a memory estimate the worker reserves it in the judges' ledger: before the
    gate, for its whole life; or with `memory_per_step` once it is in the gate (its wait for
    the gate holds no memory; a reservation that does not fit yet is waited for outside the
    gate, never inside: a timer would wait on it), keeping only its base between trials.
    """
    global _GATE, _LEDGER, _WANTED
    if not header.device_gate:
        return contextlib.nullcontext()
    from cuda_gym.runtime.device_gate import DeviceGate, MemoryLedger, device_identity

    name = device_identity(header.device)  # imports torch (stage "start")
    if header.device == "cuda" and header.gate_alone:
        # A rerun after running out of memory has the device to itself throughout.
        rep.enter("memory")  # waiting for device memory: the parent's clock stops too
        capacity = device_memory_capacity(header.memory_share)
        MemoryLedger(name, capacity).reserve(capacity)  # released when this process exits
        rep.enter("gate", "entry")
        _GATE = DeviceGate(name)
        _GATE.note("stage", "gate.entry")
        return _GATE.exclusive()
    if header.device == "cuda" and header.device_bytes is not None:
        # (released when this process exits)
        ledger = MemoryLedger(name, device_memory_capacity(header.memory_share))
        if not header.memory_per_step:
            rep.enter("memory")  # waiting for device memory: the parent's clock stops too
            ledger.reserve(header.device_bytes)
        else:
            _LEDGER, _WANTED = ledger, int(header.device_bytes)
    rep.enter("gate", "entry")
    _GATE = DeviceGate(name)
    _GATE.note("stage", "gate.entry")
    return _GATE.shared() if _LEDGER is None else _shared_with_memory(rep)


@contextlib.contextmanager
def _shared_with_memory(rep: Reporter):
    with _GATE.shared():
        _take_memory(rep)
        yield


def _take_memory(rep: Reporter) -> None:
    """In the gate (shared): hold the whole estimate, waiting for it outside the gate."""
    missing = _WANTED - _LEDGER.held
    if missing <= 0 or _LEDGER.try_reserve(missing):
        return
    stage = rep.stage
    with _GATE.outside():
        rep.enter("memory")
        _LEDGER.reserve(missing)
        rep.enter("gate", "entry")  # (taking the gate back)
    rep.enter(stage)


def keep_memory_base(runner_pids: list[int]) -> None:
    """CUDA: measure what this worker and its runners hold now; keep that between trials.

    Called once the candidate is loaded (its model and state on the device), its runner's
    cached memory given back: NVML's counts (contexts included, cuda_gym.judge.device_use)
    plus a margin, never more than the estimate. Without NVML's counts nothing is given back.
    """
    if _LEDGER is None:
        return
    import torch

    from cuda_gym.judge.device_use import process_bytes

    torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    counts = process_bytes(str(getattr(props, "uuid", "")), runner_pids)
    if counts is not None:
        _LEDGER.set_base(min(_WANTED, sum(counts) + BASE_MARGIN_BYTES))


# What a worker's base keeps beyond the measured counts (allocator rounding, a runner's
# first call's workspace).
BASE_MARGIN_BYTES = 1 << 28


# The share of a GPU's memory that judge workers reserve together by default: above 1, an
# overcommit (a reservation is a judgement's peak, held for its life; JudgeConfig.memory_share).
MEMORY_SHARE = 1.5


def device_memory_capacity(share: float = MEMORY_SHARE) -> int:
    """Bytes of this process's GPU that the judges of the machine may reserve together."""
    import torch

    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return int(share * total)


def state_tensors(model) -> dict:
    """{dotted path: tensor} of the plain tensor attributes of `model` and its submodules.

    Neither parameters nor buffers: state a module keeps beside them, like KernelBench's
    recurrent references' `self.hidden`, `self.h0` (drawn at random in __init__).
    """
    import torch

    found = {}
    for prefix, module in model.named_modules():
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor) and not name.startswith("_"):
                found[f"{prefix}.{name}" if prefix else name] = value
    return found


def fresh_state_each_call(model) -> None:
    """Start every forward of `model` from the plain tensor attributes it has now.

    A reference whose forward stores its next hidden state on self would otherwise answer
    each call from another state: trial, repeat and timed call alike start from the state
    the model was built with, in the reference, the candidate and the baselines
    (cuda_gym.judge.runner does the same for the models it serves).
    """
    modules = dict(model.named_modules())
    initial = []
    for path, value in state_tensors(model).items():
        owner, _, name = path.rpartition(".")
        initial.append((modules[owner], name, value))
    if initial:

        def restore(module, args):
            for owner, name, value in initial:
                setattr(owner, name, value)

        model.register_forward_pre_hook(restore)


def memory_short(device: str, need: int | None) -> bool:
    """Whether the device (the host's memory, on the CPU) has too little free memory now.

    Too little: under twice `need` (the judgement's reservation; None: unknown) or under a
    quarter of the whole. Called by the driver once a candidate that reported running out of
    memory is gone, so nothing of the candidate's is counted.
    """
    if device == "cuda":
        import torch

        free, total = torch.cuda.mem_get_info()
    else:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        free = int(info["MemAvailable"].split()[0]) * 1024
        total = int(info["MemTotal"].split()[0]) * 1024
    return free < max(2 * (need or 0), total // 4)


@contextlib.contextmanager
def _gate_hold(rep: Reporter, stage: str, hold, why: str):
    """Run the block in `stage` under another hold of the gate, `hold(_GATE)`; then back.

    Every wait for the gate, including retaking the previous hold afterwards (another timer
    may be queued by then), is in stage "gate", where the parent stops the worker's clock.
    """
    if _GATE is None:
        rep.enter(stage)
        yield
        return
    rep.enter("gate", why)
    try:
        with hold(_GATE):
            rep.enter(stage)
            try:
                yield
            finally:
                rep.enter("gate", "back")
    finally:
        rep.enter(stage)


def alone(rep: Reporter, stage: str):
    """Hold the device alone (waiting in stage "gate"), then run the block in `stage`."""
    return _gate_hold(rep, stage, lambda gate: gate.exclusive(), "alone")


def make_way(rep: Reporter, device: str, idle: bool = False) -> None:
    """Between two steps of shared device work: let waiting timers go first, then go on.

    The device is synchronised first: nothing of this process's runs while they time. The wait
    to come back is in stage "gate", where the parent stops the worker's clock. idle: neither
    this process nor its runner holds more than their base now (between correctness trials:
    the runner gives its cached memory back after untimed calls): only the base is kept while
    stepped out, and the rest taken again on the way back in.
    """
    if _GATE is None or _GATE.held != "shared" or not _GATE.timers_waiting():
        return
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
    stage = rep.stage
    rep.enter("gate", "step")
    try:
        if idle and _LEDGER is not None and _LEDGER.base is not None:
            torch.cuda.empty_cache()
            _LEDGER.shrink()
        _GATE.make_way()
        if _LEDGER is not None:
            _take_memory(rep)
    finally:
        rep.enter(stage)


def off_device(rep: Reporter, stage: str):
    """Run a block of host-only work in `stage` without holding the gate (DeviceGate.outside).

    Not on the CPU's gate: there host work is the device's work, and would run beside a timer.
    """
    return _gate_hold(
        rep,
        stage,
        lambda gate: gate.outside() if gate.name != "cpu" else contextlib.nullcontext(),
        "outside",
    )


def pin_numerics() -> dict:
    """Full fp32 in this process (no TF32); returns the settings as recorded."""
    import torch

    # Baselines and candidates run in full fp32: no TF32 in cuBLAS or cuDNN.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return {
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
    }


def import_file(name: str, path: str):
    """Import the file at `path` as module `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def as_list(out) -> list:
    """A forward's result as a list of outputs."""
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]


def short_traceback(exc: BaseException, keep: int = 12) -> str:
    """The exception in one line (what a reader needs first), then the end of its traceback."""
    message = next((line for line in str(exc).splitlines() if line.strip()), "")
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    text = "".join(lines[-keep:])
    return f"{type(exc).__name__}: {message[:300]}\n{text[-4000:]}"


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's."""
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    return platform.processor() or platform.machine()


def gpu_state(device: str) -> dict | None:
    """Clocks, temperature and power from NVML (through torch), when available."""
    import torch

    if device != "cuda":
        return None
    state = {}
    for key, name in (
        ("sm_clock_mhz", "clock_rate"),
        ("temperature_c", "temperature"),
        ("power_mw", "power_draw"),
        ("utilization_pct", "utilization"),
    ):
        try:
            state[key] = getattr(torch.cuda, name)()
        except Exception:  # NVML missing, not permitted, or an older torch: keep what works
            state[key] = None
    return state


def runner_env() -> dict[str, str]:
    """The environment of an untrusted runner: the driver's own (set by the judge)."""
    return dict(os.environ)
