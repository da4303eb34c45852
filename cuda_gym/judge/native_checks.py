"""Checks of the candidate's native code: its sources before the build, its binaries after.

Sources (C/C++/CUDA files of kernels/ and load_inline strings): `preprocess` joins
backslash-newlines and drops comments before any scan, so a forbidden token cannot be split or
hidden; `include_violations` allows `#include` of the workspace's own files and of the
toolchain's headers only (no absolute paths, no `..`).

Binaries (trusted side, after the extension is loaded): `symbol_violations` lists a shared
object's undefined symbols (`nm -D --undefined-only`, demangled) and refuses the ones that do
compute below PyTorch's dispatcher (where the fallback ban cannot see it): ATen's per-backend
and native kernels (`at::cpu::`, `at::native::`, ...), redispatch, the dispatch TLS (popping the
dispatch-mode stack, excluding dispatch keys), and BLAS/LAPACK routines.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from cuda_gym.judge.verdict import ViolationKind, format_violation

# Demangled undefined symbols that compute below the dispatcher or switch its modes off.
_BELOW_DISPATCHER = re.compile(
    r"\bat::(?:cpu|native|compositeexplicitautograd|compositeexplicitautogradnonfunctional"
    r"|compositeimplicitautograd|meta)::"
    # at::cuda's per-backend ops (at::cuda::add); its stream/device helpers stay allowed.
    r"|\bat::cuda::(?!getCurrentCUDAStream|getDefaultCUDAStream|getStreamFromPool|CUDAStream"
    r"|getCurrentDeviceProperties|getDeviceProperties|detail::|getCurrentCUDABlasHandle"
    r"|warp_size|stream_synchronize|set_device|current_device|device_count|memcpy_and_sync"
    r"|CUDACachingAllocator::|getCurrentCUDASparseHandle)[a-z_0-9]+\("
    r"|\bat::_ops::\w+::redispatch\b"
    r"|TorchDispatchModeTLS|PythonDispatcher|\bc10::impl::tls_|_force_tls_local"
    # (Not ExcludeDispatchKeyGuard: torch's own headers inline it into every extension; the
    # source scan refuses it in the candidate's code.)
    r"|_tls_set_dispatch_key|tls_local_dispatch_key_set"
)
# Functions found by name at run time (libtorch's at::cpu:: kernels through dlsym, say): an
# extension of the candidate's has no use for them.
_RUNTIME_LOOKUP = re.compile(r"^(?:dlsym|dlvsym|dlopen|dlmopen|__libc_dl\w*)(?:@.*)?$")
_BLAS = re.compile(
    r"^(?:cblas_\w+|mkl_\w+|openblas_\w+|LAPACKE_\w+"
    r"|[sdcz](?:gemm|gemv|symm|syrk|trsm|trmm|axpy|dot|scal|ger|gesv|getrf|getrs|potrf|geqrf"
    r"|gesdd|syevd?)_?)(?:@.*)?$"
)
# Shared objects under these directories are the system's, the venv's or torch's, not the
# candidate's.
_SYSTEM_ROOTS = ("/usr/", "/lib/", "/lib64/", "/opt/", "/etc/", "/snap/")


def preprocess(text: str) -> str:
    """C/C++ text with backslash-newlines joined and comments removed (strings kept).

    Line numbers are kept: a removed comment leaves its newlines, and a joined line is padded
    with the newlines it swallowed after it.
    """
    text = text.replace("\r\n", "\n")
    out = []
    i, n = 0, len(text)
    pending = 0  # newlines swallowed by line joins, emitted at the next real newline
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            pending += 1
            i += 2
            continue
        if c == "\n":
            out.append("\n" * (1 + pending))
            pending = 0
            i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] in "/*":
            if text[i + 1] == "/":
                while i < n and text[i] != "\n":
                    if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                        pending += 1
                        i += 1
                    i += 1
            else:
                end = text.find("*/", i + 2)
                end = n if end < 0 else end + 2
                out.append(" " + "\n" * text.count("\n", i, end))
                i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]*)[>"]', re.MULTILINE)
# `#include MACRO`: a header name made by the preprocessor, which no scan can check.
_COMPUTED_INCLUDE = re.compile(r"^\s*#\s*include\s*[A-Za-z_]", re.MULTILINE)


def include_violations(text: str) -> list[tuple[int, str]]:
    """(line, message) for each `#include` that could reach a file outside the workspace.

    `text` is preprocessed. Quoted includes must be relative paths inside the workspace; an
    angle include names a header of the toolchain, torch or CUDA (searched only in their
    directories), so it too may not be absolute or climb with `..`.
    """
    found = []
    for match in _COMPUTED_INCLUDE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        found.append((line, "a computed `#include MACRO` is not allowed: name the header."))
    for match in _INCLUDE.finditer(text):
        path = match.group(2).strip()
        line = text.count("\n", 0, match.start()) + 1
        parts = Path(path).parts
        if path.startswith(("/", "~")) or ".." in parts or "\\" in path:
            found.append(
                (
                    line,
                    f"`#include {match.group(1)}{path}` names a file outside the workspace: "
                    "include your own files by relative path, and toolchain/torch/CUDA headers.",
                )
            )
    return found


def undefined_symbols(shared_object: Path) -> list[str]:
    """The demangled undefined dynamic symbols of a shared object (`nm -DC --undefined-only`)."""
    nm = shutil.which("nm")
    if nm is None:
        raise FileNotFoundError("nm (binutils) is needed to check the candidate's binaries")
    proc = subprocess.run(
        [nm, "-DC", "--undefined-only", str(shared_object)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise ValueError(f"nm failed on {shared_object.name}: {proc.stderr.strip()[:300]}")
    symbols = []
    for line in proc.stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0] in ("U", "w", "v"):
            symbols.append(parts[1].strip())
    return symbols


def symbol_violations(shared_object: Path) -> list[str]:
    """Violations ("native_symbols: ...") for the below-dispatcher symbols `shared_object` uses."""
    try:
        symbols = undefined_symbols(shared_object)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return [
            format_violation(
                ViolationKind.NATIVE_SYMBOLS,
                f"{shared_object.name} could not be inspected ({exc})",
            )
        ]
    bad = [
        s
        for s in symbols
        if _BELOW_DISPATCHER.search(s) or _BLAS.match(s) or _RUNTIME_LOOKUP.match(s)
    ]
    if not bad:
        return []
    shown = "; ".join(sorted(set(bad))[:4])
    return [
        format_violation(
            ViolationKind.NATIVE_SYMBOLS,
            f"{shared_object.name} calls PyTorch or BLAS compute below the dispatcher, "
            f"switches dispatch off or looks functions up by name ({shown}): compute with your "
            "own kernels",
        )
    ]


def candidate_objects(pid: int, trusted_roots: tuple[str, ...] = ()) -> list[Path]:
    """Shared objects mapped by process `pid` and its descendants, outside the system's.

    Anything outside the system's directories, this Python's prefixes (the venv, torch) and
    `trusted_roots` counts as the candidate's: an extension in the build cache, in
    load_inline's directory, in the scratch directory.
    """
    trusted = (
        tuple(
            str(Path(p).resolve()) + "/"
            for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, *trusted_roots}
        )
        + _SYSTEM_ROOTS
    )
    found: dict[str, Path] = {}
    for proc_pid in _tree(pid):
        try:
            maps = Path(f"/proc/{proc_pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            fields = line.split(None, 5)
            if len(fields) < 6 or ".so" not in fields[5]:
                continue
            path = fields[5].strip().removesuffix(" (deleted)")
            if not path.startswith("/") or path.startswith(trusted):
                continue
            # The file as that process sees it: a sandboxed runner's private /tmp, for one, is
            # not in this process's mount namespace.
            seen = Path(f"/proc/{proc_pid}/root{path}")
            found.setdefault(path, seen if os.path.exists(seen) else Path(path))
    return list(found.values())


def _tree(pid: int) -> list[int]:
    """`pid` and every descendant (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree
