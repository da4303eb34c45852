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
are dropped before candidate code is imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import traceback
from pathlib import Path

STAGE_FILE_SUFFIX = ".stage"


class _Reporter:
    """Writes the worker's progress (stage) and final result where the parent reads them."""

    def __init__(self, result_path: str) -> None:
        self.result_path = Path(result_path)
        self.stage_path = self.result_path.with_suffix(STAGE_FILE_SUFFIX)
        self.stage = "start"

    def enter(self, stage: str) -> None:
        self.stage = stage
        self.stage_path.write_text(stage)

    def finish(self, result: dict) -> None:
        result.setdefault("stage", self.stage)
        tmp = self.result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(self.result_path)


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


def _make_inputs(task, seed: int, device: str) -> list:
    import torch

    torch.manual_seed(seed)
    # Create tensors directly on the device: random generation of GiB-sized inputs on the CPU
    # would dominate the judge's time. Both processes use the same device RNG, so they agree.
    with torch.device(device):
        inputs = task.get_inputs()
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def _short_traceback(exc: BaseException, keep: int = 12) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    text = "".join(lines[-keep:])
    return text[-4000:]


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


def run_reference(req: dict, seeds: list[int], rep: _Reporter) -> None:
    """Compute reference outputs, compare the candidate's with them, time the baselines."""
    import dataclasses

    import torch

    from cuda_gym.judge.compare import check_outputs_match
    from cuda_gym.judge.timing import Timer

    device = req["device"]
    rep.enter("setup")
    numerics = _pin_numerics()
    task = _import_file("reference_task", req["task_path"])
    torch.manual_seed(req["init_seed"])
    with torch.device(device):
        model = task.Model(*task.get_init_inputs()).to(device)
    comparison = None
    first_inputs = None
    with torch.no_grad():
        if req.get("candidate_outputs_path"):
            rep.enter("compare")
            actual = torch.load(
                req["candidate_outputs_path"], map_location=device, weights_only=True
            )
            os.unlink(req["candidate_outputs_path"])
            expected = []
            for seed in seeds:
                inputs = _make_inputs(task, seed, device)
                out = _as_list(
                    model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
                )
                expected.append([o.detach() if isinstance(o, torch.Tensor) else o for o in out])
            cmp = check_outputs_match(expected, actual, req["atol"], req["rtol"])
            comparison = dataclasses.asdict(cmp)
            del expected, actual
        if req["baselines"]:
            first_inputs = _make_inputs(task, seeds[0], device)
    del seeds
    baselines = {}
    timer = Timer(device) if req["baselines"] else None
    with torch.no_grad():
        for name in req["baselines"]:
            rep.enter(f"baseline:{name}")
            fn = model if name == "eager" else torch.compile(model)
            try:
                baselines[name] = timer.time_ms(
                    fn, first_inputs, req["warmup_runs"], req["timed_runs"]
                )
            except Exception as exc:  # a baseline that cannot run is reported, not fatal
                baselines[name] = {"error": _short_traceback(exc, keep=3)}
    rep.finish(
        {
            "ok": True,
            "device_name": _device_name(device),
            "comparison": comparison,
            "baselines": baselines,
            "numerics": numerics,
            "torch_version": torch.__version__,
        }
    )


def run_candidate(req: dict, seeds: list[int], rep: _Reporter) -> None:
    """Load ModelNew, run it on the seeds' inputs, and optionally time and profile it."""
    import torch

    from cuda_gym.judge.timing import Timer, profile_table

    device = req["device"]
    rep.enter("setup")
    numerics = _pin_numerics()
    task = _import_file("reference_task", req["task_path"])
    init_inputs = task.get_init_inputs()
    torch.manual_seed(req["init_seed"])
    with torch.device(device):
        reference_state = task.Model(*init_inputs).state_dict()
    input_sets = [_make_inputs(task, seed, device) for seed in seeds]
    init_seed = req.pop("init_seed")
    del seeds

    rep.enter("load")
    if req.get("module_dir"):
        sys.path.insert(0, req["module_dir"])
    sys.path.insert(0, req["solution_dir"])
    try:
        solution = _import_file("model_new", os.path.join(req["solution_dir"], "model_new.py"))
        model_cls = getattr(solution, "ModelNew", None)
        if model_cls is None:
            raise AttributeError("model_new.py defines no class ModelNew")
        torch.manual_seed(init_seed)
        model = model_cls(*init_inputs)
        if isinstance(model, torch.nn.Module):
            model = model.to(device)
            own = model.state_dict()
            copied = {
                k: v for k, v in reference_state.items() if k in own and own[k].shape == v.shape
            }
            model.load_state_dict(copied, strict=False)
            missing = sorted(set(reference_state) - set(copied))
        else:
            missing = []
    except BaseException as exc:
        text = _short_traceback(exc)
        build_failed = "Error building extension" in text or "ninja" in text.lower()
        rep.finish({"ok": False, "error": text, "build_failed": build_failed})
        return

    rep.enter("run")
    outputs = []
    try:
        with torch.no_grad():
            for inputs in input_sets:
                out = _as_list(
                    model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
                )
                if device == "cuda":
                    torch.cuda.synchronize()
                outputs.append(
                    [o.detach().cpu() if isinstance(o, torch.Tensor) else o for o in out]
                )
    except BaseException as exc:
        rep.finish({"ok": False, "error": _short_traceback(exc)})
        return
    torch.save(outputs, req["outputs_path"])

    timing = None
    table = None
    try:
        with torch.no_grad():
            if req.get("timing"):
                rep.enter("timing")
                timing = Timer(device).time_ms(
                    model, input_sets[0], req["warmup_runs"], req["timed_runs"]
                )
            if req.get("profile"):
                rep.enter("profile")
                table = profile_table(model, input_sets[0], device)
    except BaseException as exc:
        rep.finish({"ok": False, "error": _short_traceback(exc)})
        return
    rep.finish(
        {
            "ok": True,
            "device_name": _device_name(device),
            "timing": timing,
            "profile_table": table,
            "weights_not_copied": missing,
            "numerics": numerics,
        }
    )


def main() -> None:
    """Entry point: `python -m cuda_gym.judge.worker ROLE < request.json`."""
    role = sys.argv[1]
    req = json.loads(sys.stdin.read())
    rep = _Reporter(req["result_path"])
    if role == "build":
        run_build(req, rep)
    elif role == "reference":
        seeds = req.pop("seeds")
        run_reference(req, seeds, rep)
    elif role == "candidate":
        seeds = req.pop("seeds")
        run_candidate(req, seeds, rep)
    else:
        raise SystemExit(f"unknown role {role!r}")
    sys.stdout.flush()
    # Skip interpreter teardown: a candidate's extension may crash in static destructors.
    os._exit(0)


if __name__ == "__main__":
    main()
