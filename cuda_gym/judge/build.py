"""Build a workspace's kernels/ sources into the `kernels_ext` extension, cached by content.

The build runs in a child process (`cuda_gym.judge.worker build`) with a timeout. Its key
covers every source and header, the flags, the device, the torch version and the toolchain, so
an identical workspace in any episode or process reuses the finished build.

Builds that miss the cache are incremental: they run in one of a few persistent work
directories per "lineage" (the same file names, flags and toolchain), where only files whose
bytes changed are rewritten, so ninja recompiles just the edited compilation units (and those
including an edited header) and relinks. An edit to the kernel file leaves the binding's object,
compiled against the full torch headers, as it was. When every work directory of the lineage is
busy (agents on different tasks often name their files alike), a build takes a fresh spare one
instead of waiting. The finished library is then copied into the content-keyed cache.

Trust: only trusted processes write here (the compilers and ninja; the build no longer imports
the extension, so none of the candidate's code runs, and the candidate's sandbox cannot see the
cache). Each finished build and each work directory is sealed (cuda_gym.judge.baselines.seal:
an HMAC over the hashes of its files) and checked before reuse: a finished build whose files
changed, gained or lost a file is discarded and built again; a work directory that does not
match its seal (altered, or left mid-build by a killed judge) is emptied and regenerated.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from cuda_gym.errors import WorkerError
from cuda_gym.judge import pch, plain_build
from cuda_gym.judge.assembler_guard import guarded_env
from cuda_gym.judge.baselines import integrity_key, seal, unseal
from cuda_gym.judge.config import JudgeConfig
from cuda_gym.judge.runner import binding_text
from cuda_gym.judge.verdict import BuildResult
from cuda_gym.runtime import python_child_env, run_process

logger = logging.getLogger(__name__)

MODULE_NAME = "kernels_ext"
SEAL_FILE = "SEAL"
CUDA_UNITS = (".cu", ".cpp")
CPU_UNITS = (".cpp",)
HEADERS = (".cuh", ".h", ".hpp", ".inl")
INCREMENTAL_SLOTS = 4
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


def lineage_key(names: list[str], device: str, flags: dict, arch: str | None) -> str:
    """Key of the work directories a build may reuse: file names, flags, device, toolchain."""
    payload = [device, flags, arch, toolchain_id(device), sorted(names)]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def _manifest(slot: Path) -> dict[str, str]:
    try:
        return json.loads((slot / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def incremental_slot(root: Path, files: dict[str, bytes]):
    """Lock and yield the work directory of this lineage whose sources match `files` best.

    Up to INCREMENTAL_SLOTS directories exist per lineage; when every one is busy the build
    never waits for them (a lineage is only file names and flags, so agents on different tasks
    that name their files alike share one): it gets a fresh spare directory, removed after.
    """
    root.mkdir(parents=True, exist_ok=True)
    digests = {r: hashlib.sha256(b).hexdigest() for r, b in files.items()}
    ranked = sorted(
        range(INCREMENTAL_SLOTS),
        key=lambda i: -sum(_manifest(root / f"slot{i}").get(r) == d for r, d in digests.items()),
    )
    for i in ranked:
        lock = open(root / f"slot{i}.lock", "w")  # noqa: SIM115 - held across the yield
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        try:
            yield root / f"slot{i}"
        finally:
            lock.close()
        return
    spare = Path(tempfile.mkdtemp(prefix="spare-", dir=root))
    try:
        yield spare
    finally:
        shutil.rmtree(spare, ignore_errors=True)


def _file_hashes(root: Path) -> dict[str, str]:
    """SHA-256 of every file under `root` (symlinks as their target text), but the seal."""
    hashes = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if rel == SEAL_FILE:
            continue
        if path.is_symlink():
            hashes[rel] = "symlink:" + os.readlink(path)
        elif path.is_file():
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            hashes[rel] = digest.hexdigest()
    return hashes


def seal_dir(root: Path, cache: Path) -> None:
    """Record the hashes of every file under `root` in its seal (HMAC under the cache's key)."""
    data = json.dumps(_file_hashes(root), sort_keys=True).encode()
    tmp = root / f".{SEAL_FILE}.tmp"
    tmp.write_bytes(seal(integrity_key(cache), data))
    tmp.replace(root / SEAL_FILE)


def sealed_intact(root: Path, cache: Path) -> bool:
    """Whether `root` holds exactly the files its seal lists, with the same bytes."""
    try:
        data = unseal(integrity_key(cache), (root / SEAL_FILE).read_bytes())
        recorded = json.loads(data) if data is not None else None
    except (OSError, ValueError):
        recorded = None
    if recorded is not None and recorded == _file_hashes(root):
        return True
    logger.warning("discarding %s: its files do not match its seal (altered or unfinished)", root)
    return False


@contextlib.contextmanager
def _sealed_slot(slot: Path, cache: Path):
    """Use an incremental work directory: emptied unless it matches its seal; sealed after."""
    if slot.exists() and any(slot.iterdir()) and not sealed_intact(slot, cache):
        shutil.rmtree(slot)
    slot.mkdir(parents=True, exist_ok=True)
    try:
        yield
    finally:
        seal_dir(slot, cache)


def _sync_sources(src_dir: Path, files: dict[str, bytes]) -> int:
    """Make src_dir hold exactly `files`, touching only files whose bytes differ.

    Returns:
        How many files were written.
    """
    written = 0
    for r, data in files.items():
        path = src_dir / r
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written += 1
    for path in sorted(src_dir.rglob("*"), reverse=True):
        rel = str(path.relative_to(src_dir))
        if path.is_file() and rel not in files:
            path.unlink()
    return written


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
    ld: list[str] = list(plain_build.NO_LTO_LINK)
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
        if done_marker.exists() and sealed_intact(build_dir, config.resolved_cache_dir):
            return BuildResult(
                ok=True,
                module_dir=str(build_dir),
                duration_s=time.monotonic() - start,
                cached=True,
                sources=tuple(rel),
            )
        if build_dir.exists():
            shutil.rmtree(build_dir)
        if plain_build.is_plain(files):
            units = [str(p.relative_to(kernels_dir)) for p in compile_units]
            return _build_plain(files, units, flags, arch, config, build_dir, start)
        lineage = lineage_key(list(files), config.device, flags, arch)
        cache = config.resolved_cache_dir
        with (
            incremental_slot(cache / "incremental" / lineage, files) as slot,
            _sealed_slot(slot, cache),
        ):
            src_dir = slot / "src"
            work_dir = slot / "build"
            src_dir.mkdir(parents=True, exist_ok=True)
            work_dir.mkdir(parents=True, exist_ok=True)
            (slot / "manifest.json").write_text(
                json.dumps({r: hashlib.sha256(b).hexdigest() for r, b in files.items()})
            )
            # The precompiled torch headers: not part of the keys (they cannot change what is
            # built, only how fast; see judge/pch.py).
            pch_dir = None
            if config.use_precompiled_header:
                pch_dir = pch.pch_dir(
                    config.resolved_cache_dir,
                    config.device,
                    flags,
                    arch,
                    toolchain_id(config.device),
                )
            light = _with_prelude(files, pch_dir) if pch_dir is not None else None
            build = functools.partial(
                _build_in_slot,
                src_dir,
                work_dir,
                kernels_dir,
                compile_units,
                flags,
                arch,
                config,
                pch_dir,
            )
            failure, log = build(light or files)
            if failure is not None and light is not None:
                # Built with the binding prelude first: as written now, whose error is reported.
                failure, log = build(files)
            if (
                failure is None
                and pch_dir is not None
                and not (pch.ready(pch_dir) and pch.prelude_ready(pch_dir))
            ):
                log += "\n" + pch.make_pch(
                    pch_dir, work_dir / "build.ninja", config.build_timeout_s
                )
            if failure is not None:
                return BuildResult(
                    ok=False,
                    module_dir=None,
                    log=log[-20000:],
                    errors=failure,
                    duration_s=time.monotonic() - start,
                    sources=tuple(rel),
                )
            build_dir.mkdir(parents=True)
            tmp = build_dir / f".{MODULE_NAME}.so.tmp"
            shutil.copyfile(work_dir / f"{MODULE_NAME}.so", tmp)
            tmp.replace(so_path)
        done_marker.write_text(key)
        seal_dir(build_dir, config.resolved_cache_dir)
        return BuildResult(
            ok=True,
            module_dir=str(build_dir),
            log=log[-20000:],
            duration_s=time.monotonic() - start,
            sources=tuple(rel),
        )


def _with_prelude(files: dict[str, bytes], pch_dir: Path) -> dict[str, bytes] | None:
    """`files` with each C++ unit that includes torch headers including the prelude first.

    (runner.binding_text.) None when the prelude is not made or no unit changes.
    """
    if not pch.prelude_ready(pch_dir):
        return None
    headers = [d for r, d in files.items() if Path(r).suffix not in (".cpp", ".cu")]
    if any(b"torch/extension.h" in data for data in headers):
        return None  # included again after the prelude, it would be parsed in full
    out, changed = dict(files), False
    for rel, data in files.items():
        if Path(rel).suffix != ".cpp":
            continue
        try:
            light = binding_text(data.decode(), str(pch_dir / pch.PRELUDE))
        except UnicodeDecodeError:
            light = None
        if light is not None:
            out[rel], changed = light.encode(), True
    return out if changed else None


def _build_in_slot(
    src_dir: Path,
    work_dir: Path,
    kernels_dir: Path,
    compile_units: list[Path],
    flags: dict,
    arch: str | None,
    config: JudgeConfig,
    pch_dir: Path | None,
    sources: dict[str, bytes],
) -> tuple[str | None, str]:
    """Put `sources` in the slot and build it: (errors or None, compiler log)."""
    _sync_sources(src_dir, sources)
    if (work_dir / "build.ninja").is_file() and _ninja() is not None:
        # This slot built the same file names with the same flags before: its build.ninja is
        # what torch would write again, so ninja runs directly (no Python process, no torch
        # import) and recompiles only the changed files.
        return _run_ninja(work_dir, src_dir, config)
    extra = pch.include_flags(pch_dir) if pch_dir else []
    return _run_build_worker(
        src_dir, work_dir, kernels_dir, compile_units, flags, arch, config, extra
    )


def _build_plain(
    files: dict[str, bytes],
    units: list[str],
    flags: dict,
    arch: str | None,
    config: JudgeConfig,
    build_dir: Path,
    start: float,
) -> BuildResult:
    """A kernel-only workspace (no torch headers): a plain library, see `plain_build`."""
    rel = tuple(sorted(files))
    cache = config.resolved_cache_dir
    with tempfile.TemporaryDirectory(dir=cache, prefix="plain_src_") as tmp:
        src_dir = Path(tmp)
        _sync_sources(src_dir, files)
        work = build_dir.with_name(build_dir.name + ".partial")
        shutil.rmtree(work, ignore_errors=True)
        failure, log = plain_build.build_plain(
            src_dir,
            files,
            units,
            config.device,
            flags,
            arch,
            toolchain_id(config.device),
            cache / "objects",
            work,
            config.build_timeout_s,
            nice=config.build_nice,
            env=guarded_env(os.environ, cache),
        )
    log = log.replace(str(src_dir) + "/", "kernels/")
    if failure is not None:
        shutil.rmtree(work, ignore_errors=True)
        errors = failure if failure not in ("compile", "link") else first_errors(log, "kernels/")
        return BuildResult(
            ok=False,
            module_dir=None,
            log=log[-20000:],
            errors=errors,
            duration_s=time.monotonic() - start,
            sources=rel,
        )
    work.replace(build_dir)
    (build_dir / "BUILD_OK").write_text("plain")
    seal_dir(build_dir, cache)
    return BuildResult(
        ok=True,
        module_dir=str(build_dir),
        log=log[-20000:],
        duration_s=time.monotonic() - start,
        sources=rel,
    )


def _ninja() -> str | None:
    """The ninja executable torch's builds use: the first on PATH.

    Two versions of ninja do not share a build log: the second would rebuild everything once.
    """
    return shutil.which("ninja")


def _run_ninja(work_dir: Path, src_dir: Path, config: JudgeConfig) -> tuple[str | None, str]:
    """Re-run an existing build.ninja in work_dir; return (errors or None, compiler log)."""
    env = guarded_env(dict(os.environ, LC_ALL="C", LANG="C"), config.resolved_cache_dir)
    jobs = os.environ.get("MAX_JOBS", str(max(1, os.cpu_count() or 1)))
    proc = run_process(
        [_ninja(), "-C", str(work_dir), "-j", jobs],
        timeout_s=config.build_timeout_s,
        env=env,
        nice=config.build_nice,
    )
    log = (proc.stdout + "\n" + proc.stderr).strip()
    if proc.ok and (work_dir / f"{MODULE_NAME}.so").is_file():
        return None, log
    if proc.timed_out or proc.signal_name:
        return f"The build {proc.describe_failure(config.build_timeout_s)}.", log
    return first_errors(log, str(src_dir)), log


def _run_build_worker(
    src_dir: Path,
    work_dir: Path,
    kernels_dir: Path,
    compile_units: list[Path],
    flags: dict,
    arch: str | None,
    config: JudgeConfig,
    extra_cxx: list[str] | None = None,
) -> tuple[str | None, str]:
    """Build in work_dir with ninja (incrementally); return (errors or None, compiler log)."""
    result_path = work_dir / "result.json"
    result_path.unlink(missing_ok=True)
    request = {
        "name": MODULE_NAME,
        "sources": [str(src_dir / str(p.relative_to(kernels_dir))) for p in compile_units],
        "build_dir": str(work_dir),
        "cxx_flags": [*(extra_cxx or []), *flags["cxx"]],
        "cuda_flags": flags["cuda"],
        "ld_flags": flags["ld"],
        "result_path": str(result_path),
    }
    env = guarded_env(python_child_env(LC_ALL="C", LANG="C"), config.resolved_cache_dir)
    env.setdefault("MAX_JOBS", str(max(1, os.cpu_count() or 1)))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(config.resolved_cache_dir / "inductor"))
    if arch and "TORCH_CUDA_ARCH_LIST" not in os.environ:
        env["TORCH_CUDA_ARCH_LIST"] = arch
    proc = run_process(
        [sys.executable, "-m", "cuda_gym.judge.worker", "build"],
        timeout_s=config.build_timeout_s,
        cwd=work_dir,
        env=env,
        stdin_data=json.dumps(request).encode(),
        nice=config.build_nice,
    )
    log = (proc.stdout + "\n" + proc.stderr).strip()
    if not result_path.exists() and not (proc.timed_out or proc.signal_name):
        raise WorkerError(f"the build worker failed to start: {log[-2000:]}")
    ok = proc.ok and result_path.exists() and json.loads(result_path.read_text()).get("ok")
    if ok:
        return None, log
    if proc.timed_out or proc.signal_name:
        return f"The build {proc.describe_failure(config.build_timeout_s)}.", log
    return first_errors(log, str(src_dir)), log
