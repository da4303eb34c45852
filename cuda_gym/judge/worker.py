"""Judge worker: the child process that builds, runs the reference, or runs the candidate.

Run as `python -m cuda_gym.judge.worker ROLE` with a JSON request on standard input; it writes a
JSON result to `request["result_path"]` and tensors to `request["outputs_path"]`. Roles:

- `build`: build kernels/ sources into the `kernels_ext` torch extension.
- `candidate`: load `model_new.py`, copy the reference weights into `ModelNew`, run it on the
  seeds' inputs and save its outputs; optionally time and profile it.
- `reference`: afterwards, in a process the candidate never ran in, compute the reference
  outputs on the same inputs, compare the candidate's outputs with them on the device, and
  optionally time the eager and torch.compile baselines.

The candidate runs first and never sees reference outputs. Seeds arrive on standard input and
are dropped before candidate code is imported. Every forward pass on a trial's inputs, in either
process, starts from that trial's forward seed (`inputs.forward_seed`, derived one way), so a
stochastic model draws the same random numbers in both.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

STAGE_FILE_SUFFIX = ".stage"


class _Reporter:
    """Writes the worker's progress (stage) and final result where the parent reads them."""

    def __init__(self, result_path: str) -> None:
        self.result_path = Path(result_path)
        self.stage_path = self.result_path.with_suffix(STAGE_FILE_SUFFIX)
        self.stage = "start"
        self.started = time.monotonic()
        self.stage_s: dict[str, float] = {}

    def enter(self, stage: str) -> None:
        self._close_stage()
        self.stage = stage
        self.stage_path.write_text(stage)

    def _close_stage(self) -> None:
        now = time.monotonic()
        self.stage_s[self.stage] = round(self.stage_s.get(self.stage, 0.0) + now - self.started, 4)
        self.started = now

    def finish(self, result: dict) -> None:
        self._close_stage()
        result.setdefault("stage", self.stage)
        result.setdefault("stage_s", self.stage_s)
        result.setdefault("device_peak", _device_peak())
        tmp = self.result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(self.result_path)


def _device_peak() -> dict | None:
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


# This worker's DeviceGate (cuda_gym.runtime.device_gate), when the judge asked for one: held
# shared for the worker's whole device work, alone while it times or profiles.
_GATE = None


def _open_gate(req: dict, rep: _Reporter):
    """Enter the device's gate (shared) if the request asks for it; a context manager."""
    global _GATE
    if not req.get("device_gate"):
        return contextlib.nullcontext()
    from cuda_gym.runtime.device_gate import DeviceGate, device_identity

    name = device_identity(req["device"])  # imports torch (stage "start")
    rep.enter("gate")
    _GATE = DeviceGate(name)
    # A rerun after running out of memory has the device to itself throughout.
    return _GATE.exclusive() if req.get("gate_alone") else _GATE.shared()


@contextlib.contextmanager
def _gate_hold(rep: _Reporter, stage: str, hold):
    """Run the block in `stage` under another hold of the gate, `hold(_GATE)`; then back.

    Every wait for the gate, including retaking the previous hold afterwards (another timer
    may be queued by then), is in stage "gate", where the parent stops the worker's clock.
    """
    if _GATE is None:
        rep.enter(stage)
        yield
        return
    rep.enter("gate")
    try:
        with hold(_GATE):
            rep.enter(stage)
            try:
                yield
            finally:
                rep.enter("gate")
    finally:
        rep.enter(stage)


def _alone(rep: _Reporter, stage: str):
    """Hold the device alone (waiting in stage "gate"), then run the block in `stage`."""
    return _gate_hold(rep, stage, lambda gate: gate.exclusive())


def _off_device(rep: _Reporter, stage: str):
    """Run a block of host-only work in `stage` without holding the gate (DeviceGate.outside)."""
    return _gate_hold(rep, stage, lambda gate: gate.outside())


def _pin_numerics() -> dict:
    import torch

    # Baselines and candidates run in full fp32: no TF32 in cuBLAS or cuDNN.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return {
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
    }


def _import_file(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _as_list(out) -> list:
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]


def _short_traceback(exc: BaseException, keep: int = 12) -> str:
    """The exception in one line (what a reader needs first), then the end of its traceback."""
    message = next((line for line in str(exc).splitlines() if line.strip()), "")
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    text = "".join(lines[-keep:])
    return f"{type(exc).__name__}: {message[:300]}\n{text[-4000:]}"


def _device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    return platform.processor() or platform.machine()


def run_build(req: dict, rep: _Reporter) -> None:
    """Build the extension; the compiler's output goes to stdout/stderr for the parent."""
    from torch.utils.cpp_extension import load

    rep.enter("build")
    os.makedirs(req["build_dir"], exist_ok=True)
    try:
        load(
            name=req["name"],
            sources=req["sources"],
            build_directory=req["build_dir"],
            extra_cflags=req["cxx_flags"],
            extra_cuda_cflags=req["cuda_flags"],
            extra_ldflags=req["ld_flags"],
            verbose=True,
        )
    except Exception as exc:  # the compiler's output is in the message: hand it to the parent
        print(str(exc), file=sys.stderr)
        rep.finish({"ok": False, "error": "build failed"})
        return
    rep.finish({"ok": True})


def _clone(inputs: list) -> list:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _setup(req: dict, rep: _Reporter):
    """Pin numerics, import the task and build its Model on the device (seeded)."""
    import torch

    rep.enter("setup")
    numerics = _pin_numerics()
    task = _import_file("reference_task", req["task_path"])
    init_inputs = task.get_init_inputs()
    torch.manual_seed(req["init_seed"])
    with torch.device(req["device"]):
        model = task.Model(*init_inputs).to(req["device"])
    return task, init_inputs, model, numerics


def run_probe(req: dict, rep: _Reporter) -> None:
    """Once per task: which input distributions it tolerates, fp64 support, trivial answers.

    One distribution's inputs and outputs are on the device at a time (KernelBench's larger
    problems have inputs of several GiB each), and each trivial answer is made, compared and
    dropped before the next.
    """
    import copy

    import torch

    from cuda_gym.judge import contract
    from cuda_gym.judge.compare import MODES, check_outputs_match
    from cuda_gym.judge.inputs import DISTRIBUTIONS, forward_seed, make_inputs, seed_forward
    from cuda_gym.judge.trivial import NAMES, trivial_answer

    device = req["device"]
    task, _, model, numerics = _setup(req, rep)
    rep.enter("probe")
    # The task's contract: which inputs each transform may touch (judge/contract.py).
    input_contract = contract.probe_inputs(task, req["seed"], device)
    units = None
    ok_dists = []
    fp64_ok = True
    fp64_disagrees = False
    roofline = None
    # A trivial answer is degenerate under a mode when it matches on every distribution.
    matches = {mode: dict.fromkeys(NAMES, True) for mode in MODES}
    with torch.no_grad():
        try:
            model64 = copy.deepcopy(model).double()
        except Exception:  # some modules cannot run in float64
            model64, fp64_ok = None, False
        fseed = forward_seed(req["seed"])
        for dist in dict.fromkeys(DISTRIBUTIONS):
            spec = contract.trial_distribution(dist, input_contract["masks"])
            if dist != "as_is" and spec == "as_is":
                continue  # no input can take this transform and keep its invariants
            inputs = make_inputs(task, req["seed"], device, spec)
            seed_forward(fseed)
            out = _as_list(model(*_clone(inputs)))
            finite = all(torch.isfinite(o).all() for o in out if isinstance(o, torch.Tensor))
            if not finite and dist != "as_is":
                del inputs, out
                continue
            ok_dists.append(dist)
            out64 = None
            if model64 is not None:
                try:
                    seed_forward(fseed)
                    out64 = _as_list(model64(*_to_double(inputs)))
                except Exception:
                    model64, fp64_ok = None, False
            if dist == "as_is" and out64 is not None and not _fp64_agrees(out, out64):
                # The float64 pass computes something else: a random draw that depends on the
                # dtype (CUDA's dropout kernels consume the generator differently per dtype),
                # or dtype-dependent code. It cannot bound float32 error; strict falls back.
                # Checked on the task's own inputs only: the wide-range ones can make honest
                # float32 error exceed 1e-2 where sums cancel, and fp64 is the right bound there.
                model64, fp64_ok, out64 = None, False, None
                fp64_disagrees = True
            scales = None
            if out64 is not None:
                if units is None:
                    units = contract.try_accumulation_units(model64, _to_double(inputs))
                if units is not None:
                    seed_forward(fseed)
                    scales = [contract.strict_scales(model64, inputs, units)]
            if roofline is None:
                roofline = _roofline(model, inputs, out, device)
            for name in NAMES:
                answer = trivial_answer(name, out, inputs)
                for mode in MODES:
                    if answer is None:
                        matches[mode][name] = False
                    elif matches[mode][name]:
                        cmp = check_outputs_match(
                            [out],
                            [answer],
                            mode,
                            [out64] if out64 is not None else None,
                            scales=scales,
                        )
                        matches[mode][name] = cmp.correct
                del answer
            del inputs, out, out64
            if device == "cuda":
                torch.cuda.empty_cache()
    degenerate = {mode: [n for n in NAMES if matches[mode][n]] for mode in MODES}
    rep.finish(
        {
            "ok": True,
            "distributions": ok_dists,
            "fp64_ok": fp64_ok,
            "fp64_disagrees": fp64_disagrees,
            "degenerate": degenerate,
            "roofline": roofline,
            "numerics": numerics,
            "input_contract": input_contract,
            "strict_units": units,
        }
    )


def _fp64_agrees(out: list, out64: list) -> bool:
    """Whether the float64 pass computed what the task's own pass did, within `paper`'s 1e-2.

    Honest float32 rounding sits orders of magnitude inside that; a different function (or a
    different random draw) does not.
    """
    import torch

    from cuda_gym.judge.compare import check_outputs_match

    cast = [
        o64.to(o.dtype) if isinstance(o64, torch.Tensor) and isinstance(o, torch.Tensor) else o64
        for o, o64 in zip(out, out64)
    ]
    return len(cast) == len(out) and check_outputs_match([cast], [out], "paper").correct


def _roofline(model, inputs: list, outputs: list, device: str) -> dict | None:
    """The task's compulsory bytes and flops, and (on CUDA) the speed-of-light time."""
    from cuda_gym.judge import roofline

    info = {
        "bytes_moved": roofline.tensor_bytes(inputs) + roofline.tensor_bytes(outputs),
        "flops": roofline.count_flops(model, _clone(inputs)),
        "sol_ms": None,
    }
    if device == "cuda":
        name = _device_name(device)
        nominal = roofline.peak_bandwidth(name)
        info["bandwidth_source"] = "nominal" if nominal else "measured"
        info["bandwidth_bytes_per_s"] = nominal or roofline.measure_bandwidth(device)
        info["peak_flops"] = roofline.peak_flops(name)
        info["sol_ms"] = roofline.speed_of_light_ms(
            info["bytes_moved"], info["flops"], info["bandwidth_bytes_per_s"], info["peak_flops"]
        )
    return info


def _to_double(inputs: list) -> list:
    import torch

    return [
        x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs
    ]


def run_candidate(req: dict, seeds: list[int], rep: _Reporter) -> None:
    """Load ModelNew, run it on every input set under the fallback ban, save its outputs."""
    import torch

    from cuda_gym.judge.fallback import FallbackBan, NoBan
    from cuda_gym.judge.inputs import forward_seed, make_inputs, seed_forward
    from cuda_gym.judge.output_checks import Fingerprint, output_violations, poison_allocator
    from cuda_gym.judge.timing import Timer, profile_table, warm_profiler
    from cuda_gym.judge.transfer import OutputWriter

    device = req["device"]
    writer = OutputWriter(req.get("arena_path"))
    task, init_inputs, reference, numerics = _setup(req, rep)
    reference_state = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    del reference
    input_sets = [make_inputs(task, s, device, d) for s, d in zip(seeds, req["distributions"])]
    forward_seeds = [forward_seed(s) for s in seeds]
    init_seed = req.pop("init_seed")
    del seeds
    # make_inputs left the last trial seed in torch's generators: replace it before any
    # candidate code runs (torch.initial_seed() would tell it).
    torch.manual_seed(init_seed)

    rep.enter("load")
    harness = _harness_identity()
    if req.get("module_dir"):
        sys.path.insert(0, req["module_dir"])
    try:
        solution = _import_file("model_new", os.path.join(req["solution_dir"], "model_new.py"))
        model_cls = getattr(solution, "ModelNew", None)
        if model_cls is None:
            raise AttributeError("model_new.py defines no class ModelNew")
        torch.manual_seed(init_seed)
        model = model_cls(*init_inputs)
        missing = []
        if isinstance(model, torch.nn.Module):
            model = model.to(device)
            own = model.state_dict()
            copied = {
                k: v for k, v in reference_state.items() if k in own and own[k].shape == v.shape
            }
            model.load_state_dict(copied, strict=False)
            missing = sorted(set(reference_state) - set(copied))
    except BaseException as exc:
        text = _short_traceback(exc)
        build_failed = "Error building extension" in text or "ninja" in text.lower()
        rep.finish({"ok": False, "error": text, "build_failed": build_failed})
        return

    rep.enter("run")
    vendor_allowed = bool(req.get("allow_vendor_libraries", False))
    if req.get("lift_torch_op_ban_for_reference"):
        # Only Judge.evaluate_reference_as_candidate sets this: the candidate is the task's
        # own Model, so PyTorch ops are its legitimate content (a sanity run of the harness).
        ban = NoBan()
    else:
        ban = FallbackBan(vendor_allowed)
    violations: list[str] = []
    poison_allocator(input_sets, device)

    def guarded(*args):
        # The ban covers exactly the candidate's forward, never the harness around it.
        with ban:
            return model(*args)

    live: list[tuple[list, list]] = []
    digest = Fingerprint()

    threads = _ThreadWatch()

    def call(k: int) -> list:
        args = _clone(input_sets[k])
        seed_forward(forward_seeds[k])
        with ban:
            out = _as_list(model(*args))
        threads.sample()
        if device == "cuda":
            torch.cuda.synchronize()
        # Snapshot at return, before anything else: compared with the live tensors later to
        # catch work that goes on after forward returned (a detached thread, an unsynchronised
        # stream). A copy on the output's own device: the later comparison needs no transfer.
        saved = [o if _savable(o) else None for o in out]
        # A digest at return, not a copy (KernelBench outputs reach several GiB): compared with
        # the digest of the same tensors later to catch work that goes on after forward
        # returned (a detached thread, an unsynchronised stream).
        marks = [digest(o) if isinstance(o, torch.Tensor) else None for o in saved]
        violations.extend(output_violations(out, args, input_sets[k]))
        live.append((saved, marks))
        return saved

    try:
        with torch.no_grad():
            on_device = [call(k) for k in range(len(input_sets))]
            repeat_on_device = call(0)
            time.sleep(0.05)
            if device == "cuda":
                torch.cuda.synchronize()
            if any(
                isinstance(o, torch.Tensor) and not torch.equal(digest(o), mark)
                for out, marks in live
                for o, mark in zip(out, marks)
            ):
                violations.append("async_work: outputs changed after ModelNew.forward returned")
            if threads.deferred():
                violations.append(ASYNC_THREAD)
            live.clear()
            outputs = writer.put(on_device)
            repeat = writer.put(repeat_on_device)
            del on_device, repeat_on_device
    except BaseException as exc:
        rep.finish(
            {
                "ok": False,
                "error": _short_traceback(exc),
                "violations": _ban_violations(ban) + violations,
            }
        )
        return
    violations = _ban_violations(ban) + list(dict.fromkeys(violations))
    violations += _tampered(harness)

    timed = None
    timing = None
    table = None
    kernels = None
    if not violations:
        try:
            with torch.no_grad():
                if req.get("timing"):
                    with _alone(rep, "timing"):
                        timing, last_set, last_out = Timer(device).time_ms(
                            guarded,
                            input_sets,
                            req["warmup_runs"],
                            req["timed_runs"],
                            after_call=threads.sample,
                            before_call=lambda k: seed_forward(forward_seeds[k]),
                        )
                    timed = {"set": last_set, "outputs": writer.put(_as_list(last_out))}
                    time.sleep(0.05)
                    if threads.deferred():
                        violations.append(ASYNC_THREAD)
                # On the GPU a timed judgement is always profiled: the candidate's own kernels
                # must account for the GPU time, and the kernel sum cross-checks the timer.
                if req.get("profile") or (req.get("timing") and device == "cuda"):
                    # The profiler's first start in a process is host work (kineto, CUPTI);
                    # it happens after timing (which never runs with CUPTI attached) and
                    # outside the gate, so other workers' timings go on meanwhile.
                    with _off_device(rep, "profile.warmup"):
                        warm_profiler(device)
                    with _alone(rep, "profile"):
                        table, kernels = profile_table(
                            guarded, input_sets[0], device, vendor_allowed=vendor_allowed
                        )
        except BaseException as exc:
            rep.finish(
                {
                    "ok": False,
                    "error": _short_traceback(exc),
                    "violations": _ban_violations(ban),
                }
            )
            return
        violations = _ban_violations(ban) + _tampered(harness) + violations
    # Its own stage: past the arena's room, outputs are saved into the index here (many GiB for
    # KernelBench's largest problems), which would otherwise count as the last stage's time.
    rep.enter("save")
    writer.save({"trials": outputs, "repeat": repeat, "timed": timed}, req["outputs_path"])
    rep.finish(
        {
            "ok": True,
            "device_name": _device_name(device),
            "gpu_state": _gpu_state(device),
            "timing": timing,
            "profile_table": table if req.get("profile") else None,
            "kernels": kernels,
            "weights_not_copied": missing,
            "violations": violations,
            "numerics": numerics,
            "outputs_transfer": {
                "arena_bytes": writer.arena_bytes,
                "host_bytes": writer.host_bytes,
                "pinned_bytes": writer.pinned_bytes,
            },
        }
    )


def _gpu_state(device: str) -> dict | None:
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


ASYNC_THREAD = "async_work: ModelNew.forward started a host thread that outlived the call"


def _thread_ids() -> set[int]:
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:  # no procfs: the output snapshots remain the check
        return set()


class _ThreadWatch:
    """Host threads that ModelNew.forward started and left running when it returned.

    Sampled right after each call returns. A thread seen that way which has ended by the time
    `deferred` is asked did work after the call returned (a detached thread finishing the
    outputs); threads that stay (pools, e.g. OpenMP's) are allowed.
    """

    def __init__(self) -> None:
        self.known = _thread_ids()
        self.seen: set[int] = set()

    def sample(self) -> None:
        self.seen |= _thread_ids() - self.known

    def deferred(self) -> bool:
        return bool(self.seen - _thread_ids())


def _harness_objects() -> dict:
    """Functions the harness relies on to time and check; a candidate must not replace them."""
    import torch

    objects = {
        "time.perf_counter": time.perf_counter,
        "time.perf_counter_ns": time.perf_counter_ns,
        "time.monotonic": time.monotonic,
        "torch.save": torch.save,
        "torch.equal": torch.equal,
        "torch.Tensor.clone": torch.Tensor.clone,
        "torch.Tensor.cpu": torch.Tensor.cpu,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.Event": torch.cuda.Event,
    }
    for name in ("record", "elapsed_time", "synchronize"):
        objects[f"torch.cuda.Event.{name}"] = getattr(torch.cuda.Event, name)
    return objects


def _harness_identity() -> dict:
    return {name: id(obj) for name, obj in _harness_objects().items()}


def _tampered(before: dict) -> list[str]:
    """Violations for harness functions replaced since `before` was taken."""
    now = _harness_identity()
    return [
        f"harness_tampered: {name} was replaced while the candidate ran"
        for name, ident in before.items()
        if now.get(name) != ident
    ]


def _savable(value) -> bool:
    """Outputs the trusted side can load: plain tensors and plain scalars."""
    import torch

    from cuda_gym.judge.output_checks import is_plain_scalar

    return type(value) is torch.Tensor or is_plain_scalar(value)


def _ban_violations(ban) -> list[str]:
    return [f"torch_fallback: {op} called inside ModelNew.forward" for op in ban.violations]


def run_reference(req: dict, seeds: list[int], rep: _Reporter) -> None:
    """Compute the reference outputs, compare the candidate's with them, time the baselines."""
    import copy
    import dataclasses

    import torch

    from cuda_gym.judge.compare import Comparison, check_outputs_match, runs_agree
    from cuda_gym.judge.contract import strict_scales
    from cuda_gym.judge.inputs import forward_seed, make_inputs, seed_forward
    from cuda_gym.judge.output_checks import bitwise_equal
    from cuda_gym.judge.timing import Timer
    from cuda_gym.judge.transfer import load_outputs, to_device

    device = req["device"]
    mode = req["mode"]
    task, _, model, numerics = _setup(req, rep)
    result: dict = {"ok": True, "numerics": numerics, "torch_version": torch.__version__}
    # On a GPU the arena's pages stay registered with the driver until the comparison ends.
    with torch.no_grad(), contextlib.ExitStack() as hold:
        if req.get("candidate_outputs_path"):
            rep.enter("compare")
            try:
                # The file stays until the judgement ends: a retried reference reads it again.
                # Left in the arena (host) and copied to the device one trial at a time.
                cand = load_outputs(
                    req["candidate_outputs_path"],
                    req.get("arena_path"),
                    None,
                    hold if device == "cuda" else None,
                )
                if not isinstance(cand, dict) or not isinstance(cand.get("trials"), list):
                    raise TypeError("unexpected layout")
            except Exception as exc:  # the candidate wrote that file: its content is untrusted
                result["comparison"] = {
                    "correct": False,
                    "max_abs_error": 0.0,
                    "max_rel_error": 0.0,
                    "details": [f"the candidate's outputs could not be read back ({exc})"],
                }
                result["determinism"] = {"within_tolerance": True, "bitwise": True}
                cand = None
        if req.get("candidate_outputs_path") and cand is not None:
            use64 = mode == "strict" and req.get("fp64_ok", True)
            model64 = copy.deepcopy(model).double() if use64 else None
            timed_set = (cand.get("timed") or {}).get("set")
            if type(timed_set) is not int or not 0 <= timed_set < len(seeds):
                timed_set = None  # untrusted: the recheck below then fails
            # One trial at a time: its inputs, reference outputs and the candidate's outputs
            # are on the device together; only trial 0's and the timed set's references stay.
            trials = Comparison()
            if len(cand["trials"]) != len(seeds):
                trials.fail(f"expected {len(seeds)} trials of outputs, got {len(cand['trials'])}")
            kept = {}
            for k, (seed, dist) in enumerate(zip(seeds, req["distributions"])):
                inputs = make_inputs(task, seed, device, dist)
                fseed = forward_seed(seed)
                seed_forward(fseed)
                exp = _as_list(model(*_clone(inputs)))
                exp64 = scales = None
                if model64 is not None:
                    seed_forward(fseed)
                    exp64 = _as_list(model64(*_to_double(inputs)))
                    if req.get("strict_units"):  # fp32 arithmetic's bound (judge/contract.py)
                        seed_forward(fseed)
                        scales = strict_scales(model64, inputs, req["strict_units"])
                del inputs
                if len(cand["trials"]) == len(seeds):
                    check_outputs_match(
                        [exp],
                        [to_device(cand["trials"][k], device)],
                        mode,
                        [exp64] if exp64 is not None else None,
                        into=trials,
                        first_trial=k,
                        scales=[scales],
                    )
                if k in (0, timed_set):
                    kept[k] = (exp, exp64, scales)
                del exp, exp64
            result["comparison"] = dataclasses.asdict(trials)
            first = to_device(cand["trials"][0], device) if cand["trials"] else []
            repeat = to_device(cand["repeat"], device)
            bitwise = len(first) == len(repeat) and all(
                bitwise_equal(a, b) if isinstance(a, torch.Tensor) else a == b
                for a, b in zip(repeat, first)
            )
            agree = bitwise or runs_agree(first, repeat, mode, *kept[0])
            result["determinism"] = {"within_tolerance": agree, "bitwise": bitwise}
            del first, repeat
            if cand.get("timed") is not None:
                exp, exp64, scales = kept[timed_set] if timed_set is not None else (None,) * 3
                timed = check_outputs_match(
                    [exp] if exp is not None else [],
                    [to_device(cand["timed"]["outputs"], device)],
                    mode,
                    [exp64] if exp64 is not None else None,
                    scales=[scales],
                )
                result["timing_recheck"] = dataclasses.asdict(timed)
            del cand, kept
    baselines = {}
    if req["baselines"]:
        first_inputs = make_inputs(task, seeds[0], device, "as_is")
        input_sets = [first_inputs]
        del seeds
        timer = Timer(device)
        with torch.no_grad():
            for name in req["baselines"]:
                rep.enter(f"baseline:{name}")
                fn = model if name == "eager" else torch.compile(model)
                try:
                    if name != "eager":
                        fn(*_clone(first_inputs))  # compile on the CPU before taking the gate
                    with _alone(rep, f"baseline:{name}"):
                        baselines[name], _, _ = timer.time_ms(
                            fn, input_sets, req["warmup_runs"], req["timed_runs"]
                        )
                except Exception as exc:  # a baseline that cannot run is reported, not fatal
                    baselines[name] = {"error": _short_traceback(exc, keep=3)}
    result.update(device_name=_device_name(device), baselines=baselines)
    rep.finish(result)


# What every role imports, for the zygote to hold: torch, then what PyTorch imports lazily the
# first time an operator is dispatched under a Python dispatch mode or compiled (seconds on a
# cold process), then ours.
PRELOAD_MODULES = (
    "torch",
    "torch._dynamo",
    "torch._higher_order_ops",
    "torch.fx.experimental.symbolic_shapes",
    "torch.profiler",
    "torch.utils.cpp_extension",
    "torch.utils._python_dispatch",
    "cuda_gym.judge.compare",
    "cuda_gym.judge.contract",
    "cuda_gym.judge.fallback",
    "cuda_gym.judge.inputs",
    "cuda_gym.judge.output_checks",
    "cuda_gym.judge.timing",
)


def preload() -> None:
    """Import what every role needs, for the zygote (cuda_gym.runtime.zygote) to fork from.

    Imports only: no tensor work and no CUDA (forking after CUDA initialisation is unsafe, and
    a CPU op could start OpenMP threads that a forked child would not have). An import that
    initialises the CUDA driver is named in the error, and the zygote then does not serve.
    """
    import importlib

    from cuda_gym.runtime.zygote import driver_initialised

    for name in PRELOAD_MODULES:
        importlib.import_module(name)
        if driver_initialised():
            raise RuntimeError(f"importing {name} initialised the CUDA driver")
    import torch

    from cuda_gym.judge import fallback

    with fallback.FallbackBan(False):
        torch.empty(0)


def main() -> None:
    """Entry point: `python -m cuda_gym.judge.worker ROLE < request.json`.

    With CUDA_GYM_WORKER_CPROFILE=DIR set (a developer's switch), the role runs under cProfile
    and the top functions by cumulative time are written to DIR/<role>-<pid>.txt.
    """
    role = sys.argv[1]
    req = json.loads(sys.stdin.read())
    rep = _Reporter(req["result_path"])
    profile_dir = os.environ.get("CUDA_GYM_WORKER_CPROFILE")
    if profile_dir:
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(_run_role, role, req, rep)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
        Path(profile_dir, f"{role}-{os.getpid()}.txt").write_text(text.getvalue())
    else:
        _run_role(role, req, rep)
    sys.stdout.flush()
    # Skip interpreter teardown: a candidate's extension may crash in static destructors.
    os._exit(0)


def _run_role(role: str, req: dict, rep: _Reporter) -> None:
    if role == "build":
        run_build(req, rep)
        return
    if role not in ("probe", "reference", "candidate"):
        raise SystemExit(f"unknown role {role!r}")
    with _open_gate(req, rep):  # the roles that use the device
        if role == "probe":
            run_probe(req, rep)
        elif role == "reference":
            run_reference(req, req.pop("seeds"), rep)
        else:
            run_candidate(req, req.pop("seeds"), rep)


if __name__ == "__main__":
    main()
