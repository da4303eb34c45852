"""Build a workspace's kernels/ sources into the `kernels_ext` extension, cached by content.

The build runs in a child process (`cuda_gym.judge.worker build`) with a timeout. Its key
covers every source and header, the flags, the device, the torch version and the toolchain, so
an identical workspace in any episode or process reuses the finished build.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from cuda_gym.errors import WorkerError
from cuda_gym.judge.config import JudgeConfig
from cuda_gym.judge.verdict import BuildResult
from cuda_gym.runtime import python_child_env, run_process

MODULE_NAME = "kernels_ext"
CUDA_UNITS = (".cu", ".cpp")
CPU_UNITS = (".cpp",)
HEADERS = (".cuh", ".h", ".hpp", ".inl")
MAX_ERROR_LINES = 30
MAX_ERROR_CHARS = 3000
_ERROR_LINE = re.compile(r"(\berror\b|\bundefined reference\b|\bFAILED:)", re.IGNORECASE)


def kernel_sources(kernels_dir: Path) -> list[Path]:
    """All source and header files under kernels_dir, sorted."""
    if not kernels_dir.is_dir():
        return []
    return sorted(
        p
        for p in kernels_dir.rglob("*")
        if p.is_file() and p.suffix in CUDA_UNITS + HEADERS and not p.name.startswith(".")
    )


_TOOLCHAIN_LOCK = threading.Lock()


def toolchain_id(device: str) -> str:
    """Compiler versions and torch version that a build depends on (one probe per process)."""
    with _TOOLCHAIN_LOCK:
        return _toolchain_id(device)


@functools.lru_cache(maxsize=4)
def _toolchain_id(device: str) -> str:
    import torch

    parts = [torch.__version__, sys.version.split()[0]]
    compilers = ["c++", "nvcc"] if device == "cuda" else ["c++"]
    for exe in compilers:
        try:
            out = subprocess.run(
                [exe, "--version"], capture_output=True, text=True, timeout=30
            ).stdout
            parts.append(out.strip().splitlines()[-1] if out.strip() else exe)
        except (OSError, subprocess.TimeoutExpired):
            parts.append(f"{exe}:missing")
    return "|".join(parts)


def build_key(files: dict[str, bytes], device: str, flags: dict, arch: str | None) -> str:
    """SHA-256 over sources, flags, device, GPU architecture and toolchain."""
    h = hashlib.sha256()
    h.update(json.dumps([device, flags, arch, toolchain_id(device)], sort_keys=True).encode())
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return h.hexdigest()


def first_errors(log: str, src_dir: str) -> str:
    """The compiler's first errors with some context, paths shown relative to the workspace."""
    text = log.replace(src_dir.rstrip("/") + "/", "kernels/")
    lines = [line for line in text.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if _ERROR_LINE.search(line)]
    # Skip ninja's own "FAILED:" banner and command lines when a compiler error exists.
    compiler = [i for i in starts if "FAILED:" not in lines[i]]
    start = (compiler or starts or [max(0, len(lines) - MAX_ERROR_LINES)])[0]
    picked = [ln for ln in lines[start:] if not ln.startswith("[") or "error" in ln.lower()]
    excerpt = "\n".join(picked[:MAX_ERROR_LINES])
    n_errors = sum(1 for ln in lines if re.search(r"\berror\b", ln, re.IGNORECASE))
    if len(excerpt) > MAX_ERROR_CHARS:
        excerpt = excerpt[:MAX_ERROR_CHARS] + "\n[...]"
    if n_errors > 1:
        excerpt += f"\n({n_errors} lines mention an error in total)"
    return excerpt


def build_kernels(kernels_dir: Path, config: JudgeConfig, arch: str | None = None) -> BuildResult:
    """Build every compilation unit under kernels_dir into one extension, or reuse a cached one.

    Args:
        kernels_dir: The (snapshot of the) workspace's kernels/ directory.
        config: Judge configuration: device, flags, timeout, cache location.
        arch: GPU architecture string such as "9.0" (part of the cache key), for CUDA builds.

    Returns:
        A BuildResult; compile errors are reported in it, never raised.
    """
    start = time.monotonic()
    paths = kernel_sources(kernels_dir)
    units = CUDA_UNITS if config.device == "cuda" else CPU_UNITS
    compile_units = [p for p in paths if p.suffix in units]
    rel = [str(p.relative_to(kernels_dir)) for p in paths]
    if config.device == "cpu" and any(p.suffix == ".cu" for p in paths):
        return BuildResult(
            ok=False,
            module_dir=None,
            errors="The cpu device builds C++ only: move the code from kernels/*.cu into .cpp "
            "files (CUDA sources are built on the cuda device).",
            sources=tuple(rel),
        )
    if not compile_units:
        return BuildResult(ok=True, module_dir=None, sources=tuple(rel))
    files = {r: p.read_bytes() for r, p in zip(rel, paths)}
    cxx = list(config.cxx_flags)
    ld: list[str] = []
    if config.device == "cpu":
        cxx += ["-march=native", "-fopenmp"]
        ld += ["-fopenmp"]
    flags = {"cxx": cxx, "cuda": list(config.cuda_flags), "ld": ld}
    key = build_key(files, config.device, flags, arch)
    build_dir = config.resolved_cache_dir / "builds" / key[:32]
    so_path = build_dir / f"{MODULE_NAME}.so"
    done_marker = build_dir / "BUILD_OK"
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(build_dir.parent / f"{key[:32]}.lock", "w") as lock:
        # flock binds to this open file description: threads of one process exclude each other
        # as well as processes, so one build per key runs and the others wait for its result.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done_marker.exists() and so_path.exists():
            return BuildResult(
                ok=True,
                module_dir=str(build_dir),
                duration_s=time.monotonic() - start,
                cached=True,
                sources=tuple(rel),
            )
        if build_dir.exists():
            shutil.rmtree(build_dir)
        src_dir = build_dir / "src"
        src_dir.mkdir(parents=True)
        for r, data in files.items():
            (src_dir / r).parent.mkdir(parents=True, exist_ok=True)
            (src_dir / r).write_bytes(data)
        result_path = build_dir / "result.json"
        request = {
            "name": MODULE_NAME,
            "sources": [str(src_dir / str(p.relative_to(kernels_dir))) for p in compile_units],
            "build_dir": str(build_dir),
            "cxx_flags": cxx,
            "cuda_flags": flags["cuda"],
            "ld_flags": ld,
            "result_path": str(result_path),
        }
        env = python_child_env(LC_ALL="C", LANG="C")
        env.setdefault("MAX_JOBS", str(max(1, os.cpu_count() or 1)))
        if arch and "TORCH_CUDA_ARCH_LIST" not in os.environ:
            env["TORCH_CUDA_ARCH_LIST"] = arch
        proc = run_process(
            [sys.executable, "-m", "cuda_gym.judge.worker", "build"],
            timeout_s=config.build_timeout_s,
            cwd=build_dir,
            env=env,
            stdin_data=json.dumps(request).encode(),
        )
        log = (proc.stdout + "\n" + proc.stderr).strip()
        if not result_path.exists() and not (proc.timed_out or proc.signal_name):
            raise WorkerError(f"the build worker failed to start: {log[-2000:]}")
        ok = proc.ok and result_path.exists() and json.loads(result_path.read_text()).get("ok")
        if not ok:
            if proc.timed_out or proc.signal_name:
                errors = f"The build {proc.describe_failure(config.build_timeout_s)}."
            else:
                errors = first_errors(log, str(src_dir))
            return BuildResult(
                ok=False,
                module_dir=None,
                log=log[-20000:],
                errors=errors,
                duration_s=time.monotonic() - start,
                sources=tuple(rel),
            )
        done_marker.write_text(key)
        return BuildResult(
            ok=True,
            module_dir=str(build_dir),
            log=log[-20000:],
            duration_s=time.monotonic() - start,
            sources=tuple(rel),
        )
