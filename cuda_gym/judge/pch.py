"""A precompiled torch/extension.h for workspaces whose binding code includes the torch headers.

Parsing the torch headers is about half of a cold binding build (`benchmarks/build_latency.py`;
figures in benchmarks/README.md). GCC reads
`DIR/torch/extension.h.gch` in place of `torch/extension.h` when DIR comes first in the include
path and the .gch was made by the same compiler with the same flags; otherwise (another compiler,
other flags, the include not first in the file) it silently parses the header as usual, so a
stale or foreign .gch can cost time but never change a build.

The .gch is made once per toolchain, device and flags, from the first torch-path build's own
build.ninja (so with exactly the compiler and flags torch chose), and later cold builds with the
same flags pass `-I DIR`. It is large (about 0.8 GB) and lives in the judge's cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shlex
import subprocess
import time
from pathlib import Path

from cuda_gym.runtime import run_process

HEADER = Path("torch") / "extension.h"
GCH = Path("torch") / "extension.h.gch"


def pch_dir(cache_dir: Path, device: str, flags: dict, arch: str | None, toolchain: str) -> Path:
    """The directory of the .gch for builds with these settings."""
    payload = json.dumps([device, flags, arch, toolchain], sort_keys=True).encode()
    return Path(cache_dir) / "pch" / hashlib.sha256(payload).hexdigest()[:24]


def include_flags(directory: Path) -> list[str]:
    """`-I DIR` (and a warning should GCC reject the .gch) when DIR holds one, else nothing."""
    return [f"-I{directory}", "-Winvalid-pch"] if (directory / GCH).is_file() else []


def _ninja_vars(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if " = " in line and not line.startswith((" ", "\t", "rule ", "build ")):
            name, value = line.split(" = ", 1)
            out[name.strip()] = value.strip()
    return out


def _ninja_split(value: str) -> list[str]:
    """Split a ninja variable's value into arguments (ninja escapes spaces as '$ ')."""
    return shlex.split(value.replace("$ ", "\\ ").replace("$:", ":").replace("$$", "$"))


def compile_command(build_ninja: str, output: Path) -> list[str] | None:
    """The command that precompiles torch/extension.h as build.ninja compiles C++ files.

    None when the build does not compile against the torch headers.
    """
    names = _ninja_vars(build_ninja)
    cflags = _ninja_split(names.get("cflags", ""))
    post = _ninja_split(names.get("post_cflags", ""))
    cxx = names.get("cxx", "c++")
    includes = [cflags[i + 1] for i, f in enumerate(cflags[:-1]) if f in ("-isystem", "-I")]
    headers = [Path(d) / HEADER for d in includes if (Path(d) / HEADER).is_file()]
    if not headers:
        return None
    return [cxx, *cflags, "-x", "c++-header", str(headers[0]), "-o", str(output), *post]


def is_gcc(cxx: str) -> bool:
    """True when `cxx` is GCC (clang neither makes nor looks for .gch files this way)."""
    try:
        out = subprocess.run(
            [cxx, "-dM", "-E", "-x", "c++", "/dev/null"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "__GNUC__" in out.stdout and "__clang__" not in out.stdout


def make_pch(directory: Path, build_ninja: Path, timeout_s: float) -> str:
    """Make DIR's .gch from a finished build's build.ninja, once; return a line for the log.

    Concurrent callers wait for the first; failures are reported, never raised (builds simply
    go on without the .gch).
    """
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / GCH
    with open(directory / "make.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return f"precompiled torch header: present ({directory})"
        if (directory / "FAILED").is_file():
            return "precompiled torch header: unusable with this compiler (made once, failed)"
        tmp = directory / "tmp" / GCH
        tmp.parent.mkdir(parents=True, exist_ok=True)
        command = compile_command(build_ninja.read_text(), tmp)
        if command is None or not is_gcc(command[0]):
            (directory / "FAILED").write_text("no torch headers in the build, or not GCC\n")
            return "precompiled torch header: not used (not GCC, or no torch headers)"
        start = time.monotonic()
        proc = run_process(command, timeout_s=timeout_s, cwd=directory)
        seconds = time.monotonic() - start
        if not proc.ok or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            if not proc.timed_out:  # a time-out may be a loaded machine: try again next time
                (directory / "FAILED").write_text(proc.stderr[-4000:])
            return f"precompiled torch header: failed after {seconds:.1f} s"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(target)
        return f"precompiled torch header: made in {seconds:.1f} s ({directory})"
