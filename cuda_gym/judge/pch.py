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

`load_inline` / `cpp_extension.load` builds (judge/inline_build.py) get their own, for the few
flag sets such solutions use (INLINE_VARIANTS): made by a trusted child from the build.ninja
torch writes for an empty probe extension, never from one a sandboxed build wrote (whatever
went into that .gch would be compiled into every later solution's build). It is made without
`-DTORCH_EXTENSION_NAME` (GCC refuses a .gch made with another value of a command-line macro;
torch's headers never read that one), so extensions of any name can use it.

Beside each .gch of torch/extension.h the directory holds a second, lighter one: the binding
prelude (PRELUDE: torch/types.h, torch's pybind11 header and its exception wrapper), which is
what binding code needs. torch/extension.h also brings the whole C++ frontend, and every file
that includes it pays for the code its headers emit even when precompiled (GCC CPU seconds on
the H100 host, benchmarks/results/binding_prelude.json: a load_inline main.cpp 16.7 as
written, 6.5 with the extension.h .gch, 4.0 with the prelude's; a kernels/binding.cpp at -O3
16.8, 6.7 with the prelude's). Builds try sources rewritten to
include the prelude first (`runner.binding_text`) and fall back to the sources as written.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from cuda_gym.judge.runner import BINDING_PRELUDE
from cuda_gym.runtime import python_child_env, run_process

HEADER = Path("torch") / "extension.h"
GCH = Path("torch") / "extension.h.gch"
PRELUDE = Path("cuda_gym") / "binding_prelude.h"
PRELUDE_TEXT = BINDING_PRELUDE
# load_inline / cpp_extension.load builds with a .gch: name -> (with_cuda, extra_cflags). A build
# with other extra_cflags uses none (GCC would judge it anyway; this keeps the flags exact).
# Each is made (about 0.8 GB) only once a build of its settings asked for it.
INLINE_VARIANTS = {
    "cpp": (False, ()),
    "cpp-O2": (False, ("-O2",)),
    "cpp-O3": (False, ("-O3",)),
    "cpp-O3-openmp": (False, ("-O3", "-fopenmp")),
    "cuda": (True, ()),
    "cuda-O2": (True, ("-O2",)),
    "cuda-O3": (True, ("-O3",)),
}
_NAME_MACRO = "-DTORCH_EXTENSION_NAME="
_PROBE = (
    "import sys; from pathlib import Path; from cuda_gym.judge.pch import write_probe_ninja; "
    "write_probe_ninja(Path(sys.argv[1]), sys.argv[2])"
)
# The build stage's runner reads the variants and their directories here (JSON; see runner.py).
INLINE_PCH_ENV = "CUDA_GYM_INLINE_PCH"


def pch_dir(cache_dir: Path, device: str, flags: dict, arch: str | None, toolchain: str) -> Path:
    """The directory of the .gch for builds with these settings."""
    payload = json.dumps([device, flags, arch, toolchain], sort_keys=True).encode()
    return Path(cache_dir) / "pch" / hashlib.sha256(payload).hexdigest()[:24]


def ready(directory: Path) -> bool:
    """DIR holds a .gch and, beside it, the link to the header it was made from.

    GCC finds DIR/torch/extension.h.gch for every `#include <torch/extension.h>`, but uses a
    .gch only for the first; a second include (load_inline's own, then the solution's) then
    opens DIR/torch/extension.h, which must exist (it is the real header: `#pragma once`).
    """
    return (directory / GCH).is_file() and (directory / HEADER).is_file()


def prelude_ready(directory: Path) -> bool:
    """DIR holds the binding prelude and its .gch."""
    return (directory / PRELUDE).is_file() and (directory / f"{PRELUDE}.gch").is_file()


def include_flags(directory: Path) -> list[str]:
    """`-I DIR` (and a warning should GCC reject the .gch) when DIR holds one, else nothing."""
    return [f"-I{directory}", "-Winvalid-pch"] if ready(directory) else []


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

    None when the build does not compile against the torch headers. (The prelude's .gch is
    made by the same command with its header in place of torch/extension.h.)
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


def inline_variant(with_cuda: bool, extra_cflags) -> str | None:
    """The INLINE_VARIANTS name of a load_inline build with these settings, or None."""
    flags = tuple(f for f in (extra_cflags or ()) if isinstance(f, str) and f.strip())
    for name, (cuda, wanted) in INLINE_VARIANTS.items():
        if cuda == bool(with_cuda) and flags == wanted:
            return name
    return None


def inline_pch_dir(cache_dir: Path, variant: str, toolchain: str) -> Path:
    """The directory of the .gch for load_inline builds of `variant`."""
    return pch_dir(cache_dir, "inline", {"variant": variant}, None, toolchain)


def write_probe_ninja(directory: Path, variant: str) -> Path:
    """The build.ninja torch writes for an empty load_inline extension of `variant` (not built).

    Run in a trusted child process (make_inline_pch): it patches torch's ninja runner to stop
    once the file is written.
    """
    from torch.utils import cpp_extension

    directory.mkdir(parents=True, exist_ok=True)

    with_cuda, flags = INLINE_VARIANTS[variant]

    class Written(Exception):
        pass

    def stop(*args, **kwargs):
        raise Written

    cpp_extension._run_ninja_build = stop  # AttributeError: a changed torch (make fails)
    try:
        cpp_extension.load_inline(
            name="cuda_gym_pch_probe",
            cpp_sources="",
            build_directory=str(directory),
            extra_cflags=list(flags),
            with_cuda=with_cuda,
        )
    except Written:
        pass
    return directory / "build.ninja"


def make_inline_pch(directory: Path, variant: str, timeout_s: float, arch: str | None) -> str:
    """Make the .gch of load_inline builds of `variant` in DIR, once; a line for the log.

    A caller that finds it being made goes on without waiting (the builds meanwhile simply
    parse the headers). Failures are reported, never raised. The probe sees no GPU (`arch`,
    the judge's GPU architecture, stands in for asking one).
    """
    probe = directory / "probe"
    env = python_child_env(LC_ALL="C", LANG="C", CUDA_VISIBLE_DEVICES="")
    if arch:
        env["TORCH_CUDA_ARCH_LIST"] = arch

    def command(output: Path) -> list[str] | None:
        proc = run_process(
            [sys.executable, "-c", _PROBE, str(probe), variant], timeout_s=timeout_s, env=env
        )
        ninja = probe / "build.ninja"
        if not proc.ok or not ninja.is_file():
            return None
        made = compile_command(ninja.read_text(), output)
        return [a for a in made if not a.startswith(_NAME_MACRO)] if made else None

    return _make(directory, command, timeout_s, wait=False)


def make_pch(directory: Path, build_ninja: Path, timeout_s: float) -> str:
    """Make DIR's .gch from a finished build's build.ninja, once; return a line for the log.

    Concurrent callers wait for the first; failures are reported, never raised (builds simply
    go on without the .gch).
    """
    return _make(
        directory, lambda output: compile_command(build_ninja.read_text(), output), timeout_s
    )


def _make(directory: Path, command_for, timeout_s: float, wait: bool = True) -> str:
    """Make DIR's .gch with `command_for(output)`'s command, then the prelude's, under a lock."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / GCH
    with open(directory / "make.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return "precompiled torch header: being made by another build"
        if ready(directory) and (prelude_ready(directory) or (directory / "FAILED").is_file()):
            return f"precompiled torch header: present ({directory})"
        if (directory / "FAILED").is_file():
            return "precompiled torch header: unusable with this compiler (made once, failed)"
        tmp = directory / "tmp" / GCH
        tmp.parent.mkdir(parents=True, exist_ok=True)
        command = command_for(tmp)
        if command is None or not is_gcc(command[0]):
            (directory / "FAILED").write_text("no torch headers in the build, or not GCC\n")
            return "precompiled torch header: not used (not GCC, or no torch headers)"
        lines = []
        if not ready(directory):
            target.unlink(missing_ok=True)  # made before the header's link: made again
            line, ok = _compile(directory, command, tmp, target, timeout_s)
            lines.append(line)
            if not ok:
                return line
            target.parent.mkdir(parents=True, exist_ok=True)
            link = directory / HEADER
            link.unlink(missing_ok=True)
            link.symlink_to(command[command.index("c++-header") + 1])
            tmp.replace(target)
        # The prelude: the same command with its header in place of torch/extension.h.
        header = directory / PRELUDE
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text(PRELUDE_TEXT)
        at = command.index("c++-header") + 1
        made = directory / "tmp" / f"{PRELUDE.name}.gch"
        prelude = [*command[:at], str(header), "-o", str(made), *command[at + 3 :]]
        gch = directory / f"{PRELUDE}.gch"
        line, ok = _compile(directory, prelude, made, gch, timeout_s)
        if ok:
            made.replace(gch)
        lines.append(line.replace("torch header", "binding prelude"))
        return "; ".join(lines)


def _compile(directory: Path, command: list, made: Path, target: Path, timeout_s: float):
    """Run one precompile command: (a line for the log, whether `made` was written)."""
    start = time.monotonic()
    proc = run_process(command, timeout_s=timeout_s, cwd=directory)
    seconds = time.monotonic() - start
    if not proc.ok or not made.is_file():
        made.unlink(missing_ok=True)
        if not proc.timed_out:  # a time-out may be a loaded machine: try again next time
            (directory / "FAILED").write_text(proc.stderr[-4000:])
        return f"precompiled torch header: failed after {seconds:.1f} s", False
    return f"precompiled torch header: made in {seconds:.1f} s ({target})", True
