"""Judge worker: the trusted child process that builds, probes, or drives a candidate.

Run as `python -m cuda_gym.judge.worker ROLE` with a JSON request on standard input; it writes a
JSON result to the request's `result_path`. Roles:

- `build`: build kernels/ sources into the `kernels_ext` torch extension (cuda_gym.judge.build
  makes the request).
- `probe`: once per task, its distributions, float64 support and trivial answers
  (cuda_gym.judge.probe; request: protocol.ProbeRequest).
- `candidate`: the trusted driver (cuda_gym.judge.driver; request: protocol.CandidateRequest),
  which runs the solution in an untrusted runner process of its own, computes the reference,
  compares, times the candidate and the baselines.

No role imports candidate code: only the driver's runner does, in a process of its own.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from cuda_gym.judge.roles import Reporter, open_gate, sleep_on_gpu_waits
from cuda_gym.runtime.process import die_with_parent


def run_build(req: dict, rep: Reporter) -> None:
    """Build the extension; the compiler's output goes to stdout/stderr for the parent.

    Build only: `load` would then import the extension, running its static initialisers
    (candidate code) in this unsandboxed process. The candidate's sandboxed runner imports it.
    """
    from torch.utils import cpp_extension

    rep.enter("build")
    os.makedirs(req["build_dir"], exist_ok=True)
    importer = "_import_module_from_library"
    original = getattr(cpp_extension, importer)  # an AttributeError names a changed torch
    setattr(cpp_extension, importer, lambda *args, **kwargs: None)
    try:
        cpp_extension.load(
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
    finally:
        setattr(cpp_extension, importer, original)
    rep.finish({"ok": True})


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
    "cuda_gym.judge.driver",
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

    from cuda_gym.judge import fallback, native_checks

    with fallback.FallbackBan(False):
        torch.empty(0)
    native_checks.torch_c_exports()  # read once here, not by every driver forked from here
    native_checks.operator_structs()


def main() -> None:
    """Entry point: `python -m cuda_gym.judge.worker ROLE < request.json`.

    With CUDA_GYM_WORKER_CPROFILE=DIR set (a developer's switch), the role runs under cProfile
    and the top functions by cumulative time are written to DIR/<role>-<pid>.txt.
    """
    die_with_parent()
    role = sys.argv[1]
    data = json.loads(sys.stdin.read())
    result_path = data["result_path"] if role == "build" else data["header"]["result_path"]
    rep = Reporter(result_path)
    profile_dir = os.environ.get("CUDA_GYM_WORKER_CPROFILE")
    if profile_dir:
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(_run_role, role, data, rep)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
        Path(profile_dir, f"{role}-{os.getpid()}.txt").write_text(text.getvalue())
    else:
        _run_role(role, data, rep)
    sys.stdout.flush()
    os._exit(0)


def _run_role(role: str, data: dict, rep: Reporter) -> None:
    from cuda_gym.judge.protocol import CandidateRequest, ProbeRequest, decode

    if role == "build":
        run_build(data, rep)
        return
    if role == "probe":
        req = decode(ProbeRequest, data)
        sleep_on_gpu_waits(req.header.device)
        with open_gate(req.header, rep):
            from cuda_gym.judge.probe import run_probe

            rep.finish(run_probe(req, rep))
        return
    if role != "candidate":
        raise SystemExit(f"unknown role {role!r}")
    req = decode(CandidateRequest, data)
    from cuda_gym.judge.driver import Driver

    driver = Driver(req, rep)
    if not req.baselines_only:
        # The runner's start overlaps the waits for device memory and the gate below.
        driver.launch_candidate()
    sleep_on_gpu_waits(req.header.device)
    try:
        with open_gate(req.header, rep):
            result = driver.run()
    finally:
        driver.close_early()
    result.stage_s = {}  # the reporter adds its own
    out = dataclasses.asdict(result)
    del out["stage_s"], out["stage_cpu_s"], out["device_peak"], out["cpu_s"]
    rep.finish(out)


if __name__ == "__main__":
    main()
