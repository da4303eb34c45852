"""GCC's CPU time on binding code: as written, with the precompiled torch/extension.h, with the
precompiled binding prelude.

    python -m benchmarks.binding_prelude [--device cuda|cpu] [--out FILE]

Two sources, each compiled with the flags torch writes for a load_inline build (read from the
build.ninja of an empty probe extension, `pch.write_probe_ninja`): a load_inline `main.cpp`
(torch/extension.h, a declaration, the pybind11 module load_inline generates) at torch's
default optimisation, and a kernels/ `binding.cpp` in the style of the workspace skill
(torch/types.h, torch's pybind11 header, on cuda ATen/cuda/CUDAContext.h; a checked wrapper)
at -O3, the judge's flag for kernels/. Modes: `as_written` (no precompiled header),
`extension_gch` (-I the .gch of torch/extension.h, as the judge did before the prelude),
`prelude_gch` (the source rewritten by `runner.binding_text` to include the precompiled
prelude first) and, on cuda, `prelude_cuda_gch` (a prelude that also includes
ATen/cuda/CUDAContext.h). Each compile runs alone; CPU seconds are the compiler's own
(user + system, from wait4). Compile only: no GPU is used.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from cuda_gym.judge import pch
from cuda_gym.judge.runner import BINDING_PRELUDE, binding_text

MAIN = """#include <torch/extension.h>
torch::Tensor scaled_add(torch::Tensor x, torch::Tensor y, double alpha);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
m.def("scaled_add", torch::wrap_pybind_function(scaled_add), "scaled_add");
}"""
BINDING = """#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
{cuda_include}
void launch_scaled_add(const float* x, const float* y, float* out, int64_t n, double alpha{arg});

torch::Tensor scaled_add(torch::Tensor x, torch::Tensor y, double alpha) {{
    TORCH_CHECK(x.sizes() == y.sizes() && x.is_contiguous() && y.is_contiguous());
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && y.scalar_type() == torch::kFloat32);
    auto out = torch::empty_like(x);
    launch_scaled_add(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(),
                      x.numel(), alpha{stream});
    return out;
}}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def("scaled_add", &scaled_add); }}
"""
CUDA_PRELUDE = BINDING_PRELUDE + "#include <ATen/cuda/CUDAContext.h>\n"


def binding_source(cuda: bool) -> str:
    return BINDING.format(
        cuda_include="#include <ATen/cuda/CUDAContext.h>" if cuda else "",
        arg=", cudaStream_t stream" if cuda else "",
        stream=", at::cuda::getCurrentCUDAStream()" if cuda else "",
    )


def run(command: list[str], cwd: Path) -> dict:
    """Run a compiler command alone: wall and CPU seconds (its own and its children's)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command[:3])} ...\n{done.stderr[-3000:]}")
    if "not used because" in done.stderr or "invalid" in done.stderr.lower():
        raise SystemExit(f"a precompiled header was not used:\n{done.stderr[-2000:]}")
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def precompile(command: list[str], header: Path, out: Path, cwd: Path) -> subprocess.Popen:
    """Start precompiling `header` with the flags of `command` (pch.compile_command's)."""
    at = command.index("c++-header") + 1
    made = [*command[:at], str(header), "-o", str(out), *command[at + 3 :]]
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(made, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def measure(variant: str, source: str, work: Path, cuda: bool) -> dict:
    """Compile `source` with `variant`'s flags in every mode."""
    ninja = pch.write_probe_ninja(work / "probe", variant).read_text()
    made_at = time.perf_counter()
    command = [
        a
        for a in pch.compile_command(ninja, work / "x.gch")
        if not a.startswith("-DTORCH_EXTENSION_NAME=")
    ]
    ext_dir, light_dir, cuda_dir = work / "ext", work / "light", work / "light_cuda"
    (ext_dir / "torch").mkdir(parents=True)
    real = Path(command[command.index("c++-header") + 1])
    (ext_dir / pch.HEADER).symlink_to(real)
    jobs = [precompile(command, real, ext_dir / pch.GCH, work)]
    for directory, text in ((light_dir, BINDING_PRELUDE), (cuda_dir, CUDA_PRELUDE)):
        if directory is cuda_dir and not cuda:
            continue
        (directory / pch.PRELUDE).parent.mkdir(parents=True)
        (directory / pch.PRELUDE).write_text(text)
        jobs.append(
            precompile(command, directory / pch.PRELUDE, directory / f"{pch.PRELUDE}.gch", work)
        )
    for job in jobs:
        _, err = job.communicate()
        if job.returncode != 0:
            raise SystemExit(f"precompiling failed:\n{err.decode()[-3000:]}")
    made_s = time.perf_counter() - made_at
    flags = command[1 : command.index("-x")]
    post = command[command.index("-o") + 2 :]
    base = [command[0], *flags, "-DTORCH_EXTENSION_NAME=bench", "-Winvalid-pch"]

    def compile_text(name: str, text: str, extra: list[str]) -> dict:
        path = work / name
        path.write_text(text)
        return run([*base, *extra, "-c", str(path), "-o", str(path) + ".o", *post], work)

    results = {
        "as_written": compile_text("as_written.cpp", source, []),
        "extension_gch": compile_text("extension_gch.cpp", source, [f"-I{ext_dir}"]),
        "prelude_gch": compile_text(
            "prelude_gch.cpp", binding_text(source, str(light_dir / pch.PRELUDE)), []
        ),
    }
    if cuda:
        results["prelude_cuda_gch"] = compile_text(
            "prelude_cuda_gch.cpp", binding_text(source, str(cuda_dir / pch.PRELUDE)), []
        )
    results["precompile_wall_s"] = round(made_s, 1)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, help="write the summary as JSON here")
    args = parser.parse_args(argv)
    cuda = args.device == "cuda"
    cases = {
        "load_inline_main_cpp": ("cuda" if cuda else "cpp", MAIN),
        "kernels_binding_cpp_O3": ("cuda-O3" if cuda else "cpp-O3", binding_source(cuda)),
    }
    summary: dict = {
        "command": f"python -m benchmarks.binding_prelude --device {args.device}",
        "cpu_cores": os.cpu_count(),
        "results": {},
    }
    for name, (variant, source) in cases.items():
        with tempfile.TemporaryDirectory() as tmp:
            result = measure(variant, source, Path(tmp), cuda)
        summary["results"][name] = {"variant": variant, **result}
        line = "  ".join(
            f"{mode} {r['cpu_s']:.1f} s" for mode, r in result.items() if isinstance(r, dict)
        )
        print(f"{name:24} CPU: {line}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
