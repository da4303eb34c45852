"""The OS sandbox of every process that runs candidate code: what it sees, writes and may do.

A sandboxed process (mechanism: `cuda_gym.runtime.confine`) runs in its own mount, PID,
network, IPC, UTS and cgroup namespaces:

- **Files.** Its root is a read-only tmpfs holding, read-only, the system directories (/usr,
  /etc, /lib*, /bin, /sbin, /sys), the Python install, the venv and every import path, the
  toolchain's directories on PATH and LD_LIBRARY_PATH, and the spec's `readable` paths; a
  writable scratch directory (the spec's `scratch`, its working directory and HOME), /tmp and
  /dev/shm, all three on one private tmpfs of `tmpfs_bytes` (the scratch starts as a copy of
  the real directory; only the spec's `keep` names are copied back when it ends), and the
  spec's `writable` paths; a fresh /proc of its PID namespace; a /dev with null, zero, full,
  random, urandom and, for CUDA, the GPU's nodes. Nothing else of the machine exists in it:
  no cache directory, no other workspace, no judge scratch directory, no /dev/shm of the
  judge, no home directory.
- **Processes.** It is PID 1 of its PID namespace: when it exits, the kernel kills every
  process it started (setsid daemons included), and it cannot see or signal any process outside
  (which is what confines kill(2), tgkill(2) and pidfd_send_signal(2); seccomp need not).
- **Network.** Only an unconfigured loopback interface.
- **Identity.** As root (the judge machines), it runs as a fresh unprivileged uid and gid of
  its own (nobody, 65534, in a container that maps no spare uids), which owns only the
  writable paths; otherwise (a developer's machine) in a user
  namespace that maps the judge's uid, with every capability dropped. Either way no_new_privs
  is set, and seccomp refuses ptrace, process_vm_readv/writev, the mount API, setns, unshare
  and clone into new namespaces, kexec, bpf, keyrings, perf_event_open, userfaultfd, io_uring,
  module loading and the calls that change the machine's clock or state (EPERM).
- **Limits** (rlimits): data segment (private writable memory), file size, open files, CPU
  seconds, no core files, and, with a uid of its own, the number of processes and threads.

Where the kernel refuses a mechanism, `SandboxError` says which; the judge never falls back
silently. `JudgeConfig(sandbox=False)` or `$CUDA_GYM_UNSANDBOXED=1` turns the sandbox off for
development; every verdict then carries `flags["unsandboxed"] = True`.

Two entry points: `sandbox_argv` (a command line that confines itself, then execs the given
program) and `enter_sandbox` (confine this freshly forked, single-threaded process; the zygote
uses it).
"""

from __future__ import annotations

import glob
import logging
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cuda_gym.errors import ConfigError, SandboxError
from cuda_gym.runtime import confine

logger = logging.getLogger(__name__)

UNSANDBOXED_ENV = "CUDA_GYM_UNSANDBOXED"
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
BASIC_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
GPU_DEVICE_GLOBS = ("/dev/nvidia*", "/dev/nvidia-caps")
# Fresh uids/gids of sandboxes run by root: a range no distribution hands out.
UID_BASE = 0x5A000000
UID_SPAN = 1 << 20
NOBODY = 65534
GiB = 1 << 30


def unsandboxed_requested() -> bool:
    """Whether $CUDA_GYM_UNSANDBOXED asks for no sandbox (1/0; anything else is refused)."""
    value = os.environ.get(UNSANDBOXED_ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"${UNSANDBOXED_ENV} must be 1 or 0, got {value!r}")


@dataclass(frozen=True)
class SandboxSpec:
    """What one sandboxed process may see and write, and its limits.

    Attributes:
        scratch: The private writable directory: working directory, HOME, caches of the
            tools it runs (torch extensions, inductor, nvcc). Must exist. The sandbox works on
            a private copy of it; the real directory is never written from inside.
        keep: Names in `scratch` copied back into the real directory when the sandbox ends
            (regular files and directories only, never links); everything else it wrote is
            gone with its private filesystem.
        device: "cpu" or "cuda" ("cuda" binds the GPU's device nodes in).
        readable: Further paths visible read-only at their own paths (the solution, a built
            extension, an input file).
        writable: Further paths writable at their own paths (an output arena file, the
            device gate's directory); made the sandbox uid's when it has one.
        uid: The uid (and gid) to run as when started by root; None: a fresh one per sandbox,
            so no two sandboxes share a process count or a file.
        data_bytes: RLIMIT_DATA (private writable memory); None: no limit.
        file_bytes: RLIMIT_FSIZE, the largest file it may write (its log, which the judge holds
            open outside, included); None: no limit.
        open_files: RLIMIT_NOFILE.
        processes: RLIMIT_NPROC (processes and threads of its uid), with a uid of its own only.
        cpu_s: RLIMIT_CPU in CPU seconds; None: no limit.
        tmpfs_bytes: Bytes its scratch directory, /tmp and /dev/shm may hold together.
        env_overrides: Variables set on top of `sandbox_env`'s.
    """

    scratch: Path
    device: str = "cpu"
    keep: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    uid: int | None = None
    data_bytes: int | None = None
    file_bytes: int | None = 1 * GiB
    open_files: int = 65536
    processes: int = 4096
    cpu_s: float | None = None
    tmpfs_bytes: int = 4 * GiB
    env_overrides: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"SandboxSpec.device must be 'cpu' or 'cuda', got {self.device!r}")
        if not Path(self.scratch).is_absolute():
            raise ConfigError(f"SandboxSpec.scratch must be an absolute path, got {self.scratch}")
        for name in ("open_files", "processes", "tmpfs_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"SandboxSpec.{name} must be positive")
        for name in self.keep:
            if not name or "/" in name or name in (".", ".."):
                raise ConfigError(f"SandboxSpec.keep holds names in scratch, got {name!r}")


def _real(path: str | os.PathLike) -> str | None:
    """The absolute real path of an existing path, else None."""
    path = os.fspath(path)
    if not path or not os.path.isabs(path) or not os.path.exists(path):
        return None
    return os.path.realpath(path)


def _python_paths(env: Mapping[str, str]) -> list[str]:
    """The interpreter, the venv, every import path and the tools on PATH/LD_LIBRARY_PATH."""
    paths = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(sys.executable),
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # the cuda_gym package
        *sys.path,
    ]
    for var in ("PYTHONPATH", "PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"):
        for entry in env.get(var, "").split(os.pathsep):
            paths.append(entry)
            # A toolchain installed under its own prefix (/opt/gcc/bin, /usr/local/cuda/lib64)
            # needs the whole prefix: gcc runs cc1 from libexec/, nvcc reads nvvm/ and include/.
            parent, leaf = os.path.split(entry.rstrip("/"))
            # Never a home directory itself (~/bin): the sandbox shows no one's files.
            home = os.path.expanduser("~")
            if leaf in ("bin", "lib", "lib64") and parent not in ("", "/", "/usr", home):
                paths.append(parent)
    return paths


def _minimal(paths: Sequence[str]) -> list[str]:
    """`paths` without duplicates and without paths inside another of them."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def _mapped(path: str, first: int, count: int) -> bool:
    """Whether ids first..first+count-1 are all mapped in this user namespace (an id map file)."""
    try:
        lines = open(path).read().split("\n")
    except OSError:
        return False
    for line in lines:
        parts = line.split()
        if len(parts) == 3:
            inner, _, length = map(int, parts)
            if inner <= first and first + count <= inner + length:
                return True
    return False


_SHARED_UID_WARNED = threading.Event()


def _fresh_uid() -> int:
    """A uid (and gid) of its own for one sandbox, from a range no distribution hands out.

    In a user namespace that does not map that range (a container), every sandbox runs as
    nobody (65534) instead, which owns nothing either; their process limit is then shared.
    """
    if _mapped("/proc/self/uid_map", UID_BASE, UID_SPAN) and _mapped(
        "/proc/self/gid_map", UID_BASE, UID_SPAN
    ):
        return UID_BASE + secrets.randbelow(UID_SPAN)
    if not _SHARED_UID_WARNED.is_set():
        _SHARED_UID_WARNED.set()
        logger.warning(
            "uids %d.. are not mapped in this user namespace: every sandbox runs as uid %d",
            UID_BASE,
            NOBODY,
        )
    return NOBODY


def build_plan(spec: SandboxSpec, env: Mapping[str, str], cwd: str | os.PathLike) -> dict:
    """The plan `confine` executes (a JSON-able dict) for `spec`, run with `env` in `cwd`.

    As root, the writable paths besides the scratch are given to the plan's fresh uid here
    (the scratch stays the caller's: the sandbox writes a private copy of it).

    Raises:
        ConfigError: A writable path is "/" or holds a system or Python directory, or another
            path lies in the scratch (which the sandbox sees as its copy).
    """
    as_root = os.geteuid() == 0
    symlinks = {}
    readonly = []
    for top in SYSTEM_DIRS:
        if os.path.islink(top):
            symlinks[top] = os.readlink(top)
        if os.path.exists(top):
            readonly.append(os.path.realpath(top))
    readonly += [r for r in map(_real, _python_paths(env)) if r and r != "/"]
    readable = [r for r in map(_real, spec.readable) if r]
    readonly += readable
    scratch = os.path.realpath(spec.scratch)
    writable = [scratch] + [r for r in map(_real, spec.writable) if r]
    for path in readable + writable[1:]:
        if path.startswith(scratch + "/"):
            raise ConfigError(f"the sandbox cannot bind {path}: it is in the scratch directory")
    for path in writable:
        if path == "/" or any(r == path or r.startswith(path + "/") for r in readonly):
            raise ConfigError(f"the sandbox cannot make {path} writable: it holds system files")
    devices = list(BASIC_DEVICES)
    if spec.device == "cuda":
        devices += sorted({p for g in GPU_DEVICE_GLOBS for p in glob.glob(g)})
    uid = None
    if as_root:
        uid = spec.uid if spec.uid is not None else _fresh_uid()
        for path in writable[1:]:
            os.chown(path, uid, uid)
    return {
        "userns": not as_root,
        "uid": uid,
        "symlinks": symlinks,
        "readonly": [p for p in _minimal(readonly) if p not in writable],
        "writable": writable,
        "devices": devices,
        "scratch": scratch,
        "keep": list(spec.keep),
        "cwd": os.path.realpath(cwd),
        "tmpfs_bytes": spec.tmpfs_bytes,
        "limits": {
            "data_bytes": spec.data_bytes,
            "file_bytes": spec.file_bytes,
            "open_files": spec.open_files,
            "processes": spec.processes if as_root else None,
            "cpu_s": None if spec.cpu_s is None else max(1, int(spec.cpu_s)),
            "core_bytes": 0,
        },
    }


def sandbox_env(env: Mapping[str, str], spec: SandboxSpec) -> dict[str, str]:
    """`env` with every tool's cache and home pointed into the scratch directory."""
    scratch = str(spec.scratch)
    out = dict(env)
    out.update(
        HOME=scratch,
        TMPDIR="/tmp",
        USER="sandbox",
        LOGNAME="sandbox",
        XDG_CACHE_HOME=f"{scratch}/.cache",
        TORCH_EXTENSIONS_DIR=f"{scratch}/torch_extensions",
        TORCHINDUCTOR_CACHE_DIR=f"{scratch}/inductor",
        TRITON_CACHE_DIR=f"{scratch}/triton",
        CUDA_CACHE_PATH=f"{scratch}/.nv",
        PYTHONDONTWRITEBYTECODE="1",
    )
    out.update(spec.env_overrides)
    return out


def sandbox_argv(argv: Sequence[str], plan: dict) -> list[str]:
    """A command line that confines itself as `plan` (from `build_plan`) says, then execs `argv`.

    Run it with `sandbox_env(env, spec)` as its environment. The first process stays outside as
    a waiter and exits with the program's status, or with `confine.FAILURE_EXIT` (and a message
    on standard error, see `failure_message`) if confinement failed.
    """
    script = os.path.abspath(confine.__file__)
    return [sys.executable, "-I", "-S", script, confine.encode_plan(plan), "--", *argv]


def enter_sandbox(plan: dict) -> None:
    """Confine this freshly forked, single-threaded process (a plan from `build_plan`).

    Returns in the confined child; the calling process becomes its waiter and exits with the
    child's status.

    Raises:
        SandboxError: The kernel refused a step before the fork.
    """
    try:
        confine.confine(plan)
    except confine.SetupError as exc:
        raise SandboxError(_advice(str(exc))) from exc


def failure_message(returncode: int, stderr: str) -> str | None:
    """The sandbox's own setup failure in a finished process's status, or None."""
    if returncode != confine.FAILURE_EXIT:
        return None
    for line in stderr.splitlines():
        if line.startswith(confine.FAILURE_MARKER):
            return _advice(line.removeprefix(confine.FAILURE_MARKER).strip())
    return None


def _advice(what: str) -> str:
    return (
        f"the OS sandbox could not be set up: {what}. The judge needs root, or unprivileged "
        "user namespaces (sysctl kernel.unprivileged_userns_clone=1, and on Ubuntu "
        "kernel.apparmor_restrict_unprivileged_userns=0), with mount_setattr (Linux 5.12+) "
        f"and seccomp. For development only: JudgeConfig(sandbox=False) or {UNSANDBOXED_ENV}=1."
    )


_SUPPORT: dict[str, str | None] = {}
_SUPPORT_LOCK = threading.Lock()


def check_support(device: str = "cpu") -> None:
    """Confine a trivial process once per device and process; raise if the kernel refuses.

    Raises:
        SandboxError: Naming the mechanism that failed and what to do.
    """
    with _SUPPORT_LOCK:
        if device not in _SUPPORT:
            _SUPPORT[device] = _probe(device)
        error = _SUPPORT[device]
    if error:
        raise SandboxError(error)


def _probe(device: str) -> str | None:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cuda_gym_sandbox_probe_") as tmp:
        spec = SandboxSpec(scratch=Path(tmp), device=device)
        env = dict(os.environ)
        plan = build_plan(spec, env, tmp)
        argv = sandbox_argv([sys.executable, "-I", "-S", "-c", "pass"], plan)
        try:
            proc = subprocess.run(
                argv, env=sandbox_env(env, spec), cwd=tmp, capture_output=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return _advice(f"the probe could not run ({exc})")
    stderr = proc.stderr.decode(errors="replace")
    if proc.returncode == 0:
        return None
    return failure_message(proc.returncode, stderr) or _advice(
        f"the probe exited with status {proc.returncode}: {stderr.strip()[-500:]}"
    )
