"""Build latency: cold, cached and one-kernel-edit rebuilds against plain `load_inline`.

Run from the repository root::

    python -m benchmarks.build_latency --device cuda \\
        --out benchmarks/results/build_latency_h200.json

A workspace of one kernel file and one torch binding file (the kernel file needs no torch
headers) is built through the judge's build path (`cuda_gym.judge.build.build_kernels`) in a
fresh cache: first (nothing built before with these flags; with --precompiled-header on this
also makes the precompiled torch header, once per toolchain and flags: `judge/pch.py`), then
cold (another workspace, other file names: nothing of it built before), cached (identical
sources), and after an edit of the kernel file only.
The same three builds are measured for the kernel-only workspace (the kernel file alone, its
host function declared `extern "C"`, built as a plain library: `judge/plain_build.py`).
The same sources are built in the same run with `torch.utils.cpp_extension.load_inline`, cold
(fresh extensions directory) and after the same edit, each in a fresh process as a solution
would. Every figure is the median of --repeats rounds; ratios are ours over load_inline's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from cuda_gym.judge import JudgeConfig
from cuda_gym.judge.build import build_kernels

CPU_KERNEL = """#include <cstdint>
void scale_kernel(const float* in, float* out, int64_t n) {
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * %s + 1.0f;
}
"""
CUDA_KERNEL = """#include <cstdint>
__global__ void scale_kernel_dev(const float* in, float* out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * %s + 1.0f;
}
void scale_kernel(const float* in, float* out, int64_t n) {
  scale_kernel_dev<<<(unsigned)((n + 255) / 256), 256>>>(in, out, n);
}
"""
BINDING = """#include <torch/extension.h>
void scale_kernel(const float* in, float* out, int64_t n);
torch::Tensor scale(torch::Tensor x) {
  auto y = torch::empty_like(x);
  scale_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale", &scale); }
"""
INLINE_SCRIPT = """
import sys, time
from torch.utils.cpp_extension import load_inline
kernel, binding, device, build_dir = sys.argv[1:5]
binding_body = binding.split("PYBIND11_MODULE")[0]
kw = dict(name="bench_inline", cpp_sources=[binding_body], functions=["scale"],
          build_directory=build_dir, verbose=False)
if device == "cuda":
    kw["cuda_sources"] = [kernel]
else:
    kw["cpp_sources"] = [binding_body + "\\n" + kernel]
    kw["extra_cflags"] = ["-O3", "-fopenmp"]
    kw["extra_ldflags"] = ["-fopenmp"]
start = time.perf_counter()
load_inline(**kw)
print(time.perf_counter() - start)
"""


def _workspace(
    root: Path, device: str, factor: str, kernel_only: bool = False, stem: str = ""
) -> Path:
    kernels = root / "kernels"
    kernels.mkdir(parents=True)
    suffix = ".cu" if device == "cuda" else ".cpp"
    template = CUDA_KERNEL if device == "cuda" else CPU_KERNEL
    source = template % factor
    if kernel_only:  # no binding: the host function is called through kernels_ext directly
        source = source.replace("void scale_kernel(const", 'extern "C" void scale_kernel(const')
    else:
        (kernels / f"binding{stem}.cpp").write_text(BINDING)
    (kernels / f"kernel{stem}{suffix}").write_text(source)
    return kernels


def _ours(
    device: str, tmp: Path, kernel_only: bool = False, precompiled_header: bool | None = None
) -> dict[str, float]:
    config = JudgeConfig(
        device=device, cache_dir=tmp / "cache", precompiled_header=precompiled_header
    )
    arch = None
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        arch = f"{major}.{minor}"
    times = {}
    for label, root, factor, stem in (
        ("first", "first", "4.0f", ""),
        ("cold", "a", "2.0f", "_b"),  # other file names: no incremental slot to reuse
        ("cached", "b", "2.0f", "_b"),
        ("kernel_edit", "c", "3.0f", "_b"),
    ):
        kernels = _workspace(tmp / root, device, factor, kernel_only, stem)
        result = build_kernels(kernels, config, arch)
        if not result.ok:
            raise SystemExit(f"build failed: {result.errors}")
        times[label] = result.duration_s
    return times


def _inline(device: str, tmp: Path, factor: str, build_dir: Path) -> float:
    template = CUDA_KERNEL if device == "cuda" else CPU_KERNEL
    build_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", INLINE_SCRIPT, template % factor, BINDING, device, str(build_dir)],
        capture_output=True,
        text=True,
        cwd=tmp,
    )
    if proc.returncode != 0:
        raise SystemExit(f"load_inline failed:\n{proc.stderr[-3000:]}")
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--precompiled-header",
        choices=["auto", "on", "off"],
        default="auto",
        help="JudgeConfig.precompiled_header (auto: on for cuda)",
    )
    args = parser.parse_args(argv)
    pch = {"auto": None, "on": True, "off": False}[args.precompiled_header]

    rounds = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="build_latency_") as tmp_name:
            tmp = Path(tmp_name)
            ours = _ours(args.device, tmp / "binding", precompiled_header=pch)
            kernel_only = _ours(args.device, tmp / "kernel_only", kernel_only=True)
            inline_dir = tmp / "inline"
            inline = {
                "cold": _inline(args.device, tmp, "2.0f", inline_dir),
                "cached": _inline(args.device, tmp, "2.0f", inline_dir),
                "kernel_edit": _inline(args.device, tmp, "3.0f", inline_dir),
            }
        rounds.append({"ours": ours, "ours_kernel_only": kernel_only, "load_inline": inline})
        print(f"round {i}: ours {ours} kernel-only {kernel_only} load_inline {inline}", flush=True)
    medians = {
        who: {k: statistics.median(r[who][k] for r in rounds) for k in rounds[0][who]}
        for who in ("ours", "ours_kernel_only", "load_inline")
    }
    result = {
        "command": " ".join(["python -m benchmarks.build_latency", *(argv or sys.argv[1:])]),
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "torch": torch.__version__,
        "median_s": medians,
        "precompiled_header": JudgeConfig(
            device=args.device, precompiled_header=pch
        ).use_precompiled_header,
        "ratio_ours_over_load_inline": {
            k: medians["ours"][k] / medians["load_inline"][k] for k in medians["load_inline"]
        },
        "ratio_kernel_only_over_load_inline": {
            k: medians["ours_kernel_only"][k] / medians["load_inline"][k]
            for k in medians["load_inline"]
        },
        "rounds": rounds,
        "notes": "load_inline 'cached' and 'kernel_edit' run in a fresh process with the same "
        "build directory (its own ninja incrementality); times include that process's start. "
        "'first' is the first build with these flags in a fresh cache (with the precompiled "
        "header on, it includes making the header once); 'cold' a workspace never built before.",
    }
    keys = ("median_s", "ratio_ours_over_load_inline", "ratio_kernel_only_over_load_inline")
    print(json.dumps({k: result[k] for k in keys}, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
