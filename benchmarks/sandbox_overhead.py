"""What the OS sandbox adds to a judge worker's start: sandboxed minus plain, median of N.

A worker-like child (import torch, one small tensor operation on the device, exit) is started
REPEATS times each way, alternating: plainly and in the sandbox (cuda_gym.runtime.sandbox, with
the plan built and the scratch directory handed over as the judge does per worker), both as a
fresh process (`run_process`, the default on the CPU) and forked from a warm zygote
(`ZygoteLauncher`, the default on CUDA); and a bare `python -I -S -c pass` as a fresh process,
which shows the sandbox's own cost without torch's import time and its noise. The overhead is
the difference of the medians (target: at most 0.3 s per judgement, which starts one sandboxed
worker).

    python -m benchmarks.sandbox_overhead --device cpu --repeats 10 \
        --out FILE.json  (summaries: benchmarks/results/sandbox_overhead.json)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cuda_gym.judge.judge import WORKER_PRELOAD
from cuda_gym.runtime.process import python_child_env, run_process
from cuda_gym.runtime.sandbox import SandboxSpec, build_plan, check_support, sandbox_argv
from cuda_gym.runtime.sandbox import sandbox_env as make_sandbox_env
from cuda_gym.runtime.zygote import ZygoteLauncher

TARGET_S = 0.3
CHILD_MODULE = "benchmarks.sandbox_overhead"


def child(device: str) -> None:
    """The worker stand-in: import torch, one operation on the device, exit."""
    import torch

    x = torch.ones(1024, device=device)
    x.add_(1)
    if device == "cuda":
        torch.cuda.synchronize()
    assert float(x[0]) == 2.0


def _one(
    device: str, sandboxed: bool, launcher: ZygoteLauncher | None, bare: bool = False
) -> float:
    """Seconds from the decision to start a worker to its exit (plan building included)."""
    with tempfile.TemporaryDirectory(prefix="cuda_gym_sandbox_bench_") as tmp:
        start = time.perf_counter()
        env = python_child_env()
        plan = None
        if sandboxed:
            spec = SandboxSpec(scratch=Path(tmp), device=device)
            env = make_sandbox_env(env, spec)
            plan = build_plan(spec, env, tmp)
        args = ["--child", device]
        if launcher is not None:
            proc = launcher.run(CHILD_MODULE, args, timeout_s=300, cwd=tmp, env=env, sandbox=plan)
        else:
            argv = [sys.executable, "-m", CHILD_MODULE, *args]
            if bare:
                argv = [sys.executable, "-I", "-S", "-c", "pass"]
            proc = run_process(
                sandbox_argv(argv, plan) if plan else argv, timeout_s=300, cwd=tmp, env=env
            )
        seconds = time.perf_counter() - start
    if not proc.ok:
        raise RuntimeError(f"the child failed: {proc.describe_failure()}\n{proc.stderr[-2000:]}")
    return seconds


def measure(device: str, repeats: int, forked: bool, bare: bool = False) -> dict:
    """Alternating plain and sandboxed starts; medians and their difference.

    bare: the child is `python -I -S -c pass` (no torch import, whose time varies by seconds
    on a loaded machine), which isolates what the sandbox adds to a fresh process.
    """
    launcher = ZygoteLauncher(python_child_env(), WORKER_PRELOAD) if forked else None
    samples: dict[str, list[float]] = {"plain": [], "sandboxed": []}
    try:
        for sandboxed in (False, True):  # one of each first, not counted: warm caches, zygote
            _one(device, sandboxed, launcher, bare)
        for _ in range(repeats):
            for sandboxed in (False, True):
                key = "sandboxed" if sandboxed else "plain"
                samples[key].append(_one(device, sandboxed, launcher, bare))
    finally:
        if launcher is not None:
            launcher.close()
    plain = statistics.median(samples["plain"])
    boxed = statistics.median(samples["sandboxed"])
    return {
        "plain_median_s": round(plain, 4),
        "sandboxed_median_s": round(boxed, 4),
        "overhead_s": round(boxed - plain, 4),
        "within_target": boxed - plain <= TARGET_S,
        "samples_s": {k: [round(s, 4) for s in v] for k, v in samples.items()},
    }


def _commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def main() -> None:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", choices=("cpu", "cuda"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    start = time.perf_counter()
    check_support(args.device)
    probe_s = time.perf_counter() - start
    summary = {
        "benchmark": "sandbox_overhead",
        "device": args.device,
        "repeats": args.repeats,
        "target_s": TARGET_S,
        "support_probe_s": round(probe_s, 4),
        "bare_process": measure(args.device, args.repeats, forked=False, bare=True),
        "fresh_process": measure(args.device, args.repeats, forked=False),
        "zygote_fork": measure(args.device, args.repeats, forked=True),
        "machine": platform.node(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "commit": _commit(),
    }
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
