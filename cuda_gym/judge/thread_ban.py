"""The fallback ban on the solution's own threads: a small trusted library the runner loads.

The runner's dispatch mode (runner._Ban) refuses PyTorch ops on forward's thread only. A thread
an extension starts (at import, kept waiting on a condition variable) is outside it: there
`x.transpose(1, 2).contiguous()` does a data-movement task and the sampler sees only PyTorch's
allowed copy. thread_ban.cpp registers a global RecordFunction callback (what a profiler of
ATen's calls uses) that records every op outside the allowed set, or a dtype-changing copy,
called on a thread other than the runner's, and on the runner's own thread every op outside
forward and, inside it, every op run inside another (an allowed op made to run other code);
the runner reports them as `torch_fallback`.
Switching RecordFunction off or removing callbacks from C++ is refused by the symbol check
(native_checks); what a process reports of itself can only make its verdict worse.

The library is built once per torch and compiler by the judge (a trusted process) into its
cache, which sandboxed runners read but cannot write; every candidate's runner loads it.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

from cuda_gym.runtime import python_child_env, run_process

SOURCE = Path(__file__).with_name("thread_ban.cpp")
FOLDER = "thread_ban"
LIBRARY = "libcuda_gym_thread_ban.so"
BUILD_TIMEOUT_S = 300.0
_TORCH_BUILD_INFO = (
    "import json, torch; from torch.utils import cpp_extension as c; "
    "print(json.dumps({'include': c.include_paths(), 'lib': c.TORCH_LIB_PATH, "
    "'abi': int(torch._C._GLIBCXX_USE_CXX11_ABI)}))"
)


class ThreadBanUnavailable(RuntimeError):
    """The library could not be built here (no C++ compiler, no torch headers)."""


def _compiler() -> str:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"


@functools.lru_cache(maxsize=8)
def _key(compiler: str) -> str:
    """The build's key: the source, torch and the compiler (read once per process)."""
    spec = importlib.util.find_spec("torch")
    torch_dir = str(Path(spec.origin).parent) if spec and spec.origin else ""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    payload = [SOURCE.read_text(), version, torch_dir, compiler, sys.version_info[:2]]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:24]


def library(cache_dir: Path) -> Path:
    """The built library in the judge's cache, built first when missing (seconds, once).

    Raises ThreadBanUnavailable with the compiler's message when it cannot be built.
    """
    folder = Path(cache_dir) / FOLDER / _key(_compiler())
    path = folder / LIBRARY
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process builds it; the others wait, then read
        if not path.is_file():
            _build(path)
    return path


def _build(path: Path) -> None:
    info = run_process(
        [sys.executable, "-c", _TORCH_BUILD_INFO], timeout_s=120, env=python_child_env()
    )
    if not info.ok:
        raise ThreadBanUnavailable(f"torch's build settings: {info.stderr.strip()[-400:]}")
    settings = json.loads(info.stdout.strip().splitlines()[-1])
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    argv = [
        _compiler(),
        "-O2",
        "-DNDEBUG",
        "-std=c++17",
        "-shared",
        "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={settings['abi']}",
        *(f"-I{d}" for d in settings["include"]),
        str(SOURCE),
        "-o",
        str(tmp),
        f"-L{settings['lib']}",
        "-lc10",
        "-ltorch_cpu",
        f"-Wl,-rpath,{settings['lib']}",
    ]
    try:
        built = run_process(argv, timeout_s=BUILD_TIMEOUT_S)
    except OSError as exc:  # no compiler at all
        raise ThreadBanUnavailable(f"{argv[0]}: {exc}") from None
    if not built.ok:
        tmp.unlink(missing_ok=True)
        why = "timed out" if built.timed_out else built.stderr.strip()[-600:]
        raise ThreadBanUnavailable(f"{argv[0]} could not build {SOURCE.name}: {why}")
    tmp.replace(path)
