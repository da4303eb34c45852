"""What one call of a solution's own extension function costs the host, its work aside.

A GPU solution's own host code is glue: pybind11's dispatch, the argument casts and checks,
a launch. `cuda_gym.judge.cpu_time` allows each call of its own functions that forward makes
`HOST_MS_PER_OWN_CALL` of own host time (a Python loop over time steps makes a thousand), so
that allowance must sit well above this cost, and an attacker's empty calls buy host time at
that rate. This builds an extension whose function takes seven tensors and only reads their
pointers, calls it in a Python loop over tensor views as an RNN's time loop does, and prints the
CPU time per call with and without the call (upper bound of the own share: libtorch's and the
interpreter's are in it). CPU only; no GPU needed.

    python -m benchmarks.own_call_glue [--calls 20480] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

SOURCE = r"""
#include <torch/extension.h>
void step(torch::Tensor a, torch::Tensor b, torch::Tensor c, torch::Tensor d, torch::Tensor e,
          torch::Tensor f, torch::Tensor g) {
  TORCH_CHECK(a.dim() == 2 && g.dim() == 2, "rows expected");
  (void)a.data_ptr<float>(); (void)b.data_ptr<float>(); (void)g.data_ptr<float>();
}
"""


def measure(calls: int, repeats: int) -> dict:
    """CPU microseconds per step of the loop, with the call and with only its views."""
    import torch
    from torch.utils.cpp_extension import load_inline

    from cuda_gym.judge.cpu_time import HOST_MS_PER_OWN_CALL

    with tempfile.TemporaryDirectory(prefix="own_call_glue_") as tmp:
        ext = load_inline(
            name="own_call_glue", cpp_sources=SOURCE, functions=["step"], build_directory=tmp
        )
        steps = 1024
        x, out = torch.randn(steps, 4, 32), torch.empty(steps, 4, 32)
        w, b = torch.randn(32, 32), torch.randn(32)
        rounds = max(1, calls // steps)
        with_call, views_only = [], []
        for _ in range(repeats):
            start = time.process_time()
            for _ in range(rounds):
                for t in range(steps):
                    ext.step(x[t], out[t], w, w, b, b, out[t])
            with_call.append((time.process_time() - start) / (rounds * steps) * 1e6)
            start = time.process_time()
            for _ in range(rounds):
                for t in range(steps):
                    x[t], out[t], out[t]
            views_only.append((time.process_time() - start) / (rounds * steps) * 1e6)
    call_us = statistics.median(with_call) - statistics.median(views_only)
    return {
        "step_us": round(statistics.median(with_call), 2),
        "views_us": round(statistics.median(views_only), 2),
        "call_us": round(call_us, 2),
        "allowance_us": HOST_MS_PER_OWN_CALL * 1e3,
        "margin": round(HOST_MS_PER_OWN_CALL * 1e3 / call_us, 1) if call_us > 0 else None,
        "calls_per_repeat": rounds * steps,
        "repeats": repeats,
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20480)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", help="write the summary JSON here")
    args = p.parse_args(argv)
    report = {
        "benchmark": "own_call_glue",
        "host": platform.node(),
        **measure(args.calls, args.repeats),
    }
    print(
        f"one call of seven tensors: {report['call_us']} us of CPU (step {report['step_us']} us,"
        f" its views {report['views_us']} us); allowed {report['allowance_us']} us a call"
        f" (x{report['margin']})"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
