"""nvcc's time on a load_inline cuda.cu with torch/extension.h, torch/types.h or ATen's headers.

    python -m benchmarks.nvcc_header [--out FILE]

Compiles one KernelBench-style CUDA source (a kernel and its torch wrapper) with torch's own
nvcc flags for sm_90: including torch/extension.h, torch/types.h, and the light ATen headers the
judge's build stage tries first (`runner.lighter_sources`: then torch/types.h, then the source
as written), and prints wall and CPU seconds and nvcc's own phase times (`nvcc --time`).
Compile only: needs nvcc and torch's headers, no GPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path

SOURCE = """#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be CUDA");
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
HEADERS = ("torch/extension.h", "torch/types.h", "aten")  # aten: runner.lighter_sources


def nvcc_command(source: Path, obj: Path, timing: Path) -> list[str]:
    """torch's nvcc flags for a load_inline cuda.cu (sm_90), with `--time`."""
    from torch.utils import cpp_extension

    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    cuda_home = cpp_extension.CUDA_HOME or "/usr/local/cuda"
    includes.append(str(Path(cuda_home) / "include"))
    return [
        str(Path(cuda_home) / "bin" / "nvcc"),
        "-DTORCH_EXTENSION_NAME=bench",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        "-D_GLIBCXX_USE_CXX11_ABI=1",
        *(arg for path in includes for arg in ("-isystem", path)),
        *cpp_extension.COMMON_NVCC_FLAGS,
        "-gencode=arch=compute_90,code=sm_90",
        "--compiler-options",
        "-fPIC",
        "-std=c++17",
        "-c",
        str(source),
        "-o",
        str(obj),
        "--time",
        str(timing),
    ]


def compile_with(header: str, work: Path) -> dict:
    """Wall seconds and nvcc's phase seconds for the source including `header`."""
    from cuda_gym.judge.runner import lighter_sources

    stem = header.replace("/", "_").replace(".", "_")
    source = work / f"{stem}.cu"
    if header == "aten":
        source.write_text(lighter_sources(SOURCE)[0])
    else:
        source.write_text(SOURCE.replace("torch/extension.h", header))
    timing = work / f"{stem}.csv"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        nvcc_command(source, work / f"{stem}.o", timing), capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"nvcc failed with {header}:\n{done.stderr[-2000:]}")
    phases: dict[str, float] = {}
    with timing.open() as handle:
        for row in csv.DictReader(handle, skipinitialspace=True):
            name = (row.get("phase name ") or row.get("phase name") or "").strip()
            value = next(v for k, v in row.items() if k and k.strip() == "metric")
            phases[name] = phases.get(name, 0.0) + float(value) / 1e3
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "phases_s": {k: round(v, 2) for k, v in phases.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the summary as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = {header: compile_with(header, Path(tmp)) for header in HEADERS}
    for header, result in results.items():
        print(
            f"{header:20} {result['wall_s']:6.1f} s wall {result['cpu_s']:6.1f} s CPU"
            f"  {result['phases_s']}"
        )
    full, light, aten = (results[h]["cpu_s"] for h in HEADERS)
    summary = {
        "command": "python -m benchmarks.nvcc_header",
        "results": results,
        "ratio_light_over_full": round(light / full, 3),  # CPU seconds
        "ratio_aten_over_light": round(aten / light, 3),
    }
    print(f"CPU: torch/types.h over torch/extension.h {summary['ratio_light_over_full']}, ATen's")
    print(f"headers over torch/types.h {summary['ratio_aten_over_light']}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
