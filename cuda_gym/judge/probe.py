"""The probe role: once per task, what the judge needs to know about it.

Which input distributions it tolerates, whether it runs in float64, which trivial answers
(zeros, the input, ...) would pass, its roofline, and whether it only moves data (its forward
dispatches nothing but allocation, fills, views and copies: PyTorch's copies are then refused
in the candidate's forward, `fallback.COPY_OPS`). Trusted code only: the task's Model.
"""

from __future__ import annotations

from cuda_gym.judge.protocol import ProbeRequest
from cuda_gym.judge.roles import (
    Reporter,
    as_list,
    device_name,
    fresh_state_each_call,
    import_file,
    pin_numerics,
)


def _setup(req: ProbeRequest, rep: Reporter):
    """Pin numerics, import the task and build its Model on the device (seeded)."""
    import torch

    rep.enter("setup")
    numerics = pin_numerics()
    task = import_file("reference_task", req.header.task_path)
    init_inputs = task.get_init_inputs()
    torch.manual_seed(req.init_seed)
    with torch.device(req.header.device):
        model = task.Model(*init_inputs).to(req.header.device)
    return task, model, numerics


def _clone(inputs: list) -> list:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def run_probe(req: ProbeRequest, rep: Reporter) -> dict:
    """Once per task: which input distributions it tolerates, fp64 support, trivial answers.

    One distribution's inputs and outputs are on the device at a time (KernelBench's larger
    problems have inputs of several GiB each), and each trivial answer is made, compared and
    dropped before the next.
    """
    import copy

    import torch

    from cuda_gym.judge import contract
    from cuda_gym.judge.compare import MODES, check_outputs_match
    from cuda_gym.judge.fallback import moves_data_only
    from cuda_gym.judge.inputs import DISTRIBUTIONS, forward_seed, make_inputs, seed_forward
    from cuda_gym.judge.trivial import NAMES, trivial_answer

    device = req.header.device
    task, model, numerics = _setup(req, rep)
    rep.enter("probe")
    # The task's contract: which inputs each transform may touch (judge/contract.py).
    input_contract = contract.probe_inputs(task, req.seed, device)
    units = None
    ok_dists = []
    fp64_ok = True
    fp64_disagrees = False
    roofline = None
    data_movement = False
    # A trivial answer is degenerate under a mode when it matches on every distribution.
    matches = {mode: dict.fromkeys(NAMES, True) for mode in MODES}
    with torch.no_grad():
        try:
            model64 = copy.deepcopy(model).double()
        except Exception:  # some modules cannot run in float64
            model64, fp64_ok = None, False
        for each in (model, model64):
            if each is not None:
                fresh_state_each_call(each)
        fseed = forward_seed(req.seed)
        for dist in dict.fromkeys(DISTRIBUTIONS):
            spec = contract.trial_distribution(dist, input_contract["masks"])
            if dist != "as_is" and spec == "as_is":
                continue  # no input can take this transform and keep its invariants
            inputs = make_inputs(task, req.seed, device, spec)
            seed_forward(fseed)
            out = as_list(model(*_clone(inputs)))
            finite = all(torch.isfinite(o).all() for o in out if isinstance(o, torch.Tensor))
            if not finite and dist != "as_is":
                del inputs, out
                continue
            ok_dists.append(dist)
            out64 = None
            if model64 is not None:
                try:
                    seed_forward(fseed)
                    out64 = as_list(model64(*_to_double(inputs)))
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
                seed_forward(fseed)
                data_movement = moves_data_only(model, _clone(inputs))
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
    return {
        "ok": True,
        "distributions": ok_dists,
        "fp64_ok": fp64_ok,
        "fp64_disagrees": fp64_disagrees,
        "degenerate": degenerate,
        "roofline": roofline,
        "numerics": numerics,
        "input_contract": input_contract,
        "strict_units": units,
        "data_movement": data_movement,
    }


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
        name = device_name(device)
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
