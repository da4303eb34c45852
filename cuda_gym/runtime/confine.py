"""Confine this process: new namespaces, a read-only view of the system, no privileges, seccomp.

The mechanism under `cuda_gym.runtime.sandbox` (which decides the policy: what is visible,
what is writable, which limits). It imports the standard library only, so that it also runs as
a script before the sandboxed program is exec'd:

    python -I -S cuda_gym/runtime/confine.py PLAN -- PROGRAM ARGS...

(PLAN as `encode_plan` writes it: marshal, in hex, so that no slow module is imported first.)

`confine(plan)` must be called in a single-threaded process. It unshares the mount, PID,
network, IPC, UTS and cgroup namespaces (and a user namespace when not root), then forks once
more: the calling process stays outside as a waiter and never returns (it exits with the
child's status); the child is PID 1 of the new PID namespace, so when it exits the kernel kills
every process it left behind, setsid daemons included. Before the fork, a size-bounded tmpfs
of the sandbox's own (the "box") is mounted over the scratch directory and the scratch's
content copied into it: the sandbox's scratch, /tmp and /dev/shm are directories of the box,
so all it writes together is bounded by `tmpfs_bytes` and never reaches the machine's
filesystem. When the code has ended, the waiter copies the plan's `keep` names (regular files
and directories only) from the box back to the real scratch directory. The child builds a new
root on a tmpfs (the plan's read-only and writable paths bound at their own paths, the box's
directories, a fresh /proc, a minimal /dev), pivots into it, applies rlimits, drops to an
unprivileged uid (or, in a user namespace, drops every capability), sets no_new_privs,
installs a seccomp filter and returns to its caller, which then runs the untrusted code.

A failure before the untrusted code runs is reported by the waiter, which the untrusted code
cannot reach: it writes a line starting with FAILURE_MARKER to standard error and exits with
FAILURE_EXIT (a child that exits with FAILURE_EXIT by itself is reported as status 1).
"""

from __future__ import annotations

import ctypes
import errno
import marshal
import os
import resource
import select
import signal
import stat
import struct
import sys

FAILURE_EXIT = 125
FAILURE_MARKER = "cuda_gym sandbox setup failed:"

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
# Namespace flags a clone(2) of the untrusted code may not pass (CLONE_NEWTIME shares its bit
# with clone's exit signal, so clone3 and unshare, which are refused outright, cover it).
CLONE_NAMESPACE_FLAGS = (
    CLONE_NEWNS
    | CLONE_NEWCGROUP
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
)

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
MOUNT_ATTR_RDONLY = 1
MOUNT_ATTR_NOSUID = 2
MOUNT_ATTR_NODEV = 4
AT_FDCWD = -100
AT_RECURSIVE = 0x8000

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECCOMP = 22
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
# SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP, SECBIT_KEEP_CAPS off, each with its lock bit.
SECUREBITS_LOCKED_NOROOT = 0x01 | 0x02 | 0x04 | 0x08 | 0x20

# Syscall numbers by architecture: (audit arch, {name: number}).
_X86_64 = {
    "clone": 56, "clone3": 435, "ptrace": 101, "process_vm_readv": 310,
    "process_vm_writev": 311, "mount": 165, "umount2": 166, "pivot_root": 155,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "open_tree": 428, "mount_setattr": 442, "setns": 308, "unshare": 272, "kexec_load": 246,
    "kexec_file_load": 320, "bpf": 321, "keyctl": 250, "add_key": 248, "request_key": 249,
    "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "settimeofday": 164,
    "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159, "syslog": 103,
    "quotactl": 179, "open_by_handle_at": 304, "name_to_handle_at": 303, "chroot": 161,
    "iopl": 172, "ioperm": 173, "kcmp": 312, "pidfd_getfd": 438, "lookup_dcookie": 212,
    "vhangup": 153,
}  # fmt: skip
_AARCH64 = {
    "clone": 220, "clone3": 435, "ptrace": 117, "process_vm_readv": 270,
    "process_vm_writev": 271, "mount": 40, "umount2": 39, "pivot_root": 41,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "open_tree": 428, "mount_setattr": 442, "setns": 268, "unshare": 97, "kexec_load": 104,
    "kexec_file_load": 294, "bpf": 280, "keyctl": 219, "add_key": 217, "request_key": 218,
    "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "init_module": 105, "finit_module": 273, "delete_module": 106,
    "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89, "settimeofday": 170,
    "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171, "syslog": 116,
    "quotactl": 60, "open_by_handle_at": 265, "name_to_handle_at": 264, "chroot": 51,
    "kcmp": 272, "pidfd_getfd": 438, "lookup_dcookie": 18, "vhangup": 58,
}  # fmt: skip
ARCHES = {"x86_64": (0xC000003E, _X86_64), "aarch64": (0xC00000B7, _AARCH64)}
X32_SYSCALL_BIT = 0x40000000

# What the untrusted code may not call (EPERM): tracing and reading other processes, the mount
# API, namespace changes, kernel-wide state, and the large attack surfaces (bpf, io_uring,
# userfaultfd, keyrings). perf_event_open is refused too: CUPTI (the CUDA profiler) does not use
# it. clone3 answers ENOSYS, so that the C library falls back to clone, whose flags are checked.
DENIED_SYSCALLS = tuple(name for name in _X86_64 if name not in ("clone", "clone3"))

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]  # fmt: skip
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]  # fmt: skip
_libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


class SetupError(OSError):
    """A step of the confinement failed; the message names the step."""


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise SetupError(err, f"{what}: {os.strerror(err)}")
    return ret


def _arch() -> tuple[int, dict[str, int]]:
    machine = os.uname().machine
    if machine not in ARCHES:
        raise SetupError(errno.ENOSYS, f"no seccomp syscall table for architecture {machine}")
    return ARCHES[machine]


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {source or fstype} on {target}",
    )


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _set_mount_attr(path: str, attr: int, recursive: bool) -> None:
    """mount_setattr(2): works in a user namespace without restating the locked flags."""
    nr = _arch()[1]["mount_setattr"]
    value = _MountAttr(attr, 0, 0, 0)
    _check(
        _libc.syscall(
            ctypes.c_long(nr),
            ctypes.c_int(AT_FDCWD),
            ctypes.c_char_p(path.encode()),
            ctypes.c_uint(AT_RECURSIVE if recursive else 0),
            ctypes.byref(value),
            ctypes.c_size_t(ctypes.sizeof(value)),
        ),
        f"mount_setattr {path}",
    )


def _pivot_root(new_root: str, put_old: str) -> None:
    nr = _arch()[1]["pivot_root"]
    _check(
        _libc.syscall(ctypes.c_long(nr), ctypes.c_char_p(new_root.encode()),
                      ctypes.c_char_p(put_old.encode())),
        f"pivot_root {new_root}",
    )  # fmt: skip


def _prctl(option: int, arg2: int = 0, arg3: int = 0, what: str = "prctl") -> None:
    _check(_libc.prctl(option, arg2, arg3, 0, 0), what)


def make_dumpable() -> None:
    """Make this confined process dumpable, as an exec after its change of user would have.

    Dropping privileges leaves a process non-dumpable: its /proc files belong to root and it
    cannot open its own /proc/self/mem. A process forked from a warm one and confined (no exec
    follows) calls this to behave as an exec'd one does. Raises SetupError if refused.
    """
    _prctl(PR_SET_DUMPABLE, 1, what="make the process dumpable")


# -- the seccomp filter ------------------------------------------------------------------------

_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_JSET_K = 0x45
_BPF_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def seccomp_program(machine: str | None = None) -> bytes:
    """The BPF program of the filter, for `machine` (default: this one).

    Wrong audit arch (a 32-bit syscall entry) and x32 syscalls: EPERM. clone with a namespace
    flag, and every name of DENIED_SYSCALLS: EPERM. clone3: ENOSYS. Everything else: allowed.
    """
    audit_arch, table = ARCHES[machine] if machine else _arch()
    eperm = _RET_ERRNO | errno.EPERM
    prog = [
        _insn(_BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        _insn(_BPF_JEQ_K, 1, 0, audit_arch),
        _insn(_BPF_RET_K, 0, 0, eperm),
        _insn(_BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if audit_arch == ARCHES["x86_64"][0]:
        prog += [_insn(_BPF_JGE_K, 0, 1, X32_SYSCALL_BIT), _insn(_BPF_RET_K, 0, 0, eperm)]
    prog += [
        _insn(_BPF_JEQ_K, 0, 4, table["clone"]),
        _insn(_BPF_LD_W_ABS, 0, 0, 16),  # low word of args[0]: clone's flags
        _insn(_BPF_JSET_K, 0, 1, CLONE_NAMESPACE_FLAGS),
        _insn(_BPF_RET_K, 0, 0, eperm),
        _insn(_BPF_RET_K, 0, 0, _RET_ALLOW),
        _insn(_BPF_JEQ_K, 0, 1, table["clone3"]),
        _insn(_BPF_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),
    ]
    denied = [table[name] for name in DENIED_SYSCALLS if name in table]
    for i, nr in enumerate(denied):
        prog.append(_insn(_BPF_JEQ_K, len(denied) - i, 0, nr))
    prog += [_insn(_BPF_RET_K, 0, 0, _RET_ALLOW), _insn(_BPF_RET_K, 0, 0, eperm)]
    return b"".join(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp() -> None:
    """Install the filter on this thread (no_new_privs must be set)."""
    program = seccomp_program()
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(
        _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0),
        "install the seccomp filter",
    )


# -- the new root --------------------------------------------------------------------------


def _makedirs(path: str) -> None:
    os.makedirs(path, mode=0o755, exist_ok=True)


def _touch(path: str) -> None:
    _makedirs(os.path.dirname(path))
    if not os.path.lexists(path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


def _bind(source: str, target: str, *, writable: bool) -> None:
    """Bind `source` (in the old root) at `target`, read-only unless `writable`; no setuid."""
    if os.path.isdir(source):
        _makedirs(target)
    else:
        _touch(target)
    _mount(source, target, None, MS_BIND | MS_REC)
    attr = MOUNT_ATTR_NOSUID | (0 if writable else MOUNT_ATTR_RDONLY)
    _set_mount_attr(target, attr, recursive=True)


# -- the box: the sandbox's own bounded filesystem ------------------------------------------

BOX_DIRS = (("home", 0o700), ("tmp", 0o1777), ("shm", 0o1777))
BOX_INODES = 200_000  # files and directories, all of the box's together
COPY_MAX_DEPTH = 32
# What comes back out of a box: its files and all of them together, at most (a file of a
# GiB of holes, made with ftruncate in a tmpfs, costs nothing there and a GiB once copied).
KEEP_MAX_FILE_BYTES = 512 << 20
KEEP_MAX_BYTES = 1 << 30
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_box(plan: dict) -> tuple[int, int]:
    """Mount the box over the scratch directory and copy the scratch's content into it.

    Returns (the real scratch directory, the box's root) as open directories: the waiter's
    way to both after the pivot. Call in the new mount namespace, before the fork.
    """
    scratch = plan["scratch"]
    real = os.open(scratch, _DIR_FLAGS)
    size = int(plan["tmpfs_bytes"])
    _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV,
           f"mode=0700,size={size},nr_inodes={BOX_INODES}")  # fmt: skip
    box = os.open(scratch, _DIR_FLAGS)
    uid = plan["uid"]
    for name, mode in BOX_DIRS:
        os.mkdir(name, dir_fd=box)
        os.chmod(name, mode, dir_fd=box)
    home = os.open("home", _DIR_FLAGS, dir_fd=box)
    try:
        _copy_tree(real, home, uid)
        _own(home, 0o700, uid)
    finally:
        os.close(home)
    return real, box


def _copy_tree(
    src: int,
    dst: int,
    uid: int | None,
    depth: int = COPY_MAX_DEPTH,
    budget: list[int] | None = None,
) -> None:
    """Copy the regular files and directories under `src` into `dst` (open directories).

    Never follows a link; skips links, devices, FIFOs and sockets, and whatever lies deeper
    than `depth`. `uid`: the owner of what it creates (None: the caller). `budget`: [bytes]
    left to copy, spent as files are copied; a sparse file, or one larger than the budget or
    KEEP_MAX_FILE_BYTES, is skipped.
    """
    for name in os.listdir(src):
        _copy_entry(name, src, dst, uid, depth, budget)


def _copy_entry(
    name: str, src: int, dst: int, uid: int | None, depth: int, budget: list[int] | None = None
) -> None:
    """Copy `name` of `src` into `dst` if it is a regular file or a directory (see _copy_tree).

    Modes keep their owner's bits and lose group and world write (and setuid). Shared objects
    (the extensions the judge built) stay the caller's and read-only: code under a uid of its
    own can replace such a file but not change it, so the judge knows the built objects by
    their content (cuda_gym.judge.cpu_time).
    """
    try:
        info = os.stat(name, dir_fd=src, follow_symlinks=False)
    except FileNotFoundError:
        return
    mode = info.st_mode & 0o755
    if stat.S_ISDIR(info.st_mode) and depth > 0:
        try:
            os.mkdir(name, 0o700, dir_fd=dst)
        except FileExistsError:
            pass
        inner_src = os.open(name, _DIR_FLAGS, dir_fd=src)
        try:
            inner_dst = os.open(name, _DIR_FLAGS, dir_fd=dst)
            try:
                _copy_tree(inner_src, inner_dst, uid, depth - 1, budget)
                _own(inner_dst, mode, uid)
            finally:
                os.close(inner_dst)
        finally:
            os.close(inner_src)
    elif stat.S_ISREG(info.st_mode):
        if budget is not None:
            holes = info.st_size > info.st_blocks * 512 + 65536
            if holes or info.st_size > min(KEEP_MAX_FILE_BYTES, budget[0]):
                return  # sparse or too big: never written out in full
            budget[0] -= info.st_size
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fin = os.open(name, flags, dir_fd=src)
        try:
            if not stat.S_ISREG(os.fstat(fin).st_mode):
                return
            out_flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            fout = os.open(name, out_flags, 0o600, dir_fd=dst)
            try:
                while os.sendfile(fout, fin, None, 1 << 24):
                    pass
                if name.endswith(".so"):
                    _own(fout, mode & 0o555, None)
                else:
                    _own(fout, mode, uid)
            finally:
                os.close(fout)
        finally:
            os.close(fin)


def _own(fd: int, mode: int, uid: int | None) -> None:
    os.fchmod(fd, mode)
    if uid is not None:
        os.fchown(fd, uid, uid)


def _keep(real: int, box: int, names: list) -> None:
    """Copy the `names` the code left in the box's home back to the real scratch directory.

    At most KEEP_MAX_BYTES in all, no file with holes, none over KEEP_MAX_FILE_BYTES.
    """
    home = os.open("home", _DIR_FLAGS, dir_fd=box)
    budget = [KEEP_MAX_BYTES]
    try:
        for name in names:
            _copy_entry(name, home, real, None, COPY_MAX_DEPTH, budget)
    finally:
        os.close(home)


def _build_root(plan: dict) -> None:
    """Pivot into a tmpfs holding only what the plan lists (see the module doc)."""
    old, new = "/oldroot", "/newroot"
    # A base tmpfs to pivot into first: the old root then hangs at /oldroot, whole (the
    # original /tmp included), and the new root is assembled beside it from there.
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    _makedirs("/tmp" + old)
    _makedirs("/tmp" + new)
    _pivot_root("/tmp", "/tmp" + old)
    os.chdir("/")
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for link, target in plan["symlinks"].items():
        _makedirs(os.path.dirname(new + link))
        os.symlink(target, new + link)
    # /dev: the harmless nodes, the GPU's nodes for CUDA, and /dev/shm from the box.
    _makedirs(new + "/dev")
    _mount("tmpfs", new + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755")
    for node in plan["devices"]:
        if os.path.lexists(old + node):
            _bind(old + node, new + node, writable=True)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{new}/dev/{name}")  # fmt: skip
    box = old + plan["scratch"]  # the box, mounted over the scratch directory before the fork
    for name, target in (("shm", "/dev/shm"), ("tmp", "/tmp")):
        _bind(f"{box}/{name}", new + target, writable=True)
    # Parents before children, so a writable directory inside a read-only one is bound last.
    binds = [(p, False) for p in plan["readonly"]] + [(p, True) for p in plan["writable"]]
    for path, writable in sorted(binds, key=lambda b: (b[0].count("/"), b[1])):
        source = f"{box}/home" if path == plan["scratch"] else old + path
        if os.path.lexists(source):
            _bind(source, new + path, writable=writable)
    _makedirs(new + "/proc")
    _mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chdir(new)
    _pivot_root(".", ".")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")
    _set_mount_attr("/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV, recursive=False)
    _set_mount_attr("/dev", MOUNT_ATTR_RDONLY, recursive=False)


# -- limits and privileges -------------------------------------------------------------------

_RLIMITS = {
    "data_bytes": resource.RLIMIT_DATA,
    "address_space_bytes": resource.RLIMIT_AS,
    "file_bytes": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
    "processes": resource.RLIMIT_NPROC,
    "cpu_s": resource.RLIMIT_CPU,
    "core_bytes": resource.RLIMIT_CORE,
}


def _apply_limits(limits: dict) -> None:
    for name, value in limits.items():
        if value is None:
            continue
        which = _RLIMITS[name]
        _, hard = resource.getrlimit(which)
        value = int(value)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


def _drop_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets; lock NOROOT."""
    try:
        last = int(open("/proc/sys/kernel/cap_last_cap").read())
    except (OSError, ValueError):
        last = 63
    _prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_NOROOT, what="lock the securebits")
    for cap in range(last + 1):
        _prctl(PR_CAPBSET_DROP, cap, what=f"drop capability {cap} from the bounding set")
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, what="clear the ambient capabilities")
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = bytes(24)  # two {effective, permitted, inheritable} words, all zero
    _check(_libc.capset(header, data), "capset (drop every capability)")


def _drop_privileges(plan: dict) -> None:
    if plan["userns"]:
        _drop_capabilities()
        return
    uid = gid = int(plan["uid"])
    for cap in range(int(open("/proc/sys/kernel/cap_last_cap").read()) + 1):
        _prctl(PR_CAPBSET_DROP, cap, what=f"drop capability {cap} from the bounding set")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # from root to another uid: every capability goes
    if os.geteuid() != uid or os.getuid() != uid:
        raise SetupError(errno.EPERM, f"could not become uid {uid}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# -- entry ----------------------------------------------------------------------------------


def confine(plan: dict) -> None:
    """Confine the calling (single-threaded) process as `plan` says; see the module doc.

    Returns only in the confined child. The waiter outside exits with the child's status.

    Raises:
        SetupError: A step failed before the fork (the caller is still unconfined).
    """
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    flags |= CLONE_NEWCGROUP
    uid, gid = os.geteuid(), os.getegid()
    if plan["userns"]:
        flags |= CLONE_NEWUSER
    _check(_libc.unshare(flags), "unshare the namespaces")
    if plan["userns"]:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted from here on leaks out
    try:
        real, box = _open_box(plan)
    except OSError as exc:
        if isinstance(exc, SetupError):
            raise
        raise SetupError(exc.errno or errno.EIO, f"prepare the scratch box: {exc}") from exc
    ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
    # The waiter holds `alive_w` open until it exits: at EOF on `alive_r` the child knows it
    # is gone (its parent pid reads 0 from inside the new PID namespace either way).
    alive_r, alive_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid:
        os.close(ready_w)
        os.close(alive_r)
        _wait_and_exit(pid, ready_r, lambda: _keep(real, box, plan["keep"]))
    os.close(ready_r)
    os.close(alive_w)
    os.close(real)  # the real scratch directory: the waiter's alone
    os.close(box)
    try:
        _set_parent_death_signal(alive_r)
        _build_root(plan)
        os.chdir(plan["cwd"])
        _libc.sethostname(b"sandbox", 7)
        _apply_limits(plan["limits"])
        _drop_privileges(plan)
        # Changing credentials cleared the parent-death signal: set it again.
        _set_parent_death_signal(alive_r)
        os.close(alive_r)
        _prctl(PR_SET_NO_NEW_PRIVS, 1, what="set no_new_privs")
        install_seccomp()
    except BaseException as exc:  # report through the waiter, which the code cannot forge
        message = f"{FAILURE_MARKER} {exc}".replace("\n", " ")
        os.write(ready_w, message.encode(errors="replace")[:4000])
        os._exit(FAILURE_EXIT)
    os.write(ready_w, b"ok\n")
    _run_init(ready_w)


def _run_init(report_w: int) -> None:
    """Stay PID 1 (an init that reaps orphans) and return in a fork of it, PID 2.

    PID 1 of a namespace ignores every signal it has no handler for when sent from inside, so
    the untrusted code runs as PID 2 and a kill or abort of its own works as anywhere else.
    PID 1 reports PID 2's status to the waiter, then exits, and the kernel kills the rest.
    """
    worker = os.fork()
    if worker == 0:
        os.close(report_w)
        return
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(FAILURE_EXIT)
        if pid == worker:
            os.write(report_w, f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            os._exit(0)


def _set_parent_death_signal(alive_r: int) -> None:
    """SIGKILL this process when the waiter dies; exit now if it already has."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, what="set the parent-death signal")
    readable, _, _ = select.select([alive_r], [], [], 0)
    if readable:  # EOF: the waiter is gone
        os._exit(FAILURE_EXIT)


def _wait_and_exit(pid: int, report_r: int, keep) -> None:
    """The waiter: report a failed setup, else keep the plan's files and pass the status on.

    Never returns. The report pipe carries "ok" once the confinement is complete, then "exit N"
    from PID 1 when the code (PID 2) ended with status N; only PID 1 and the setup, never the
    untrusted code, hold its write end. `keep()` runs once PID 1 has been reaped, when the
    kernel has already reaped every other process of its namespace.
    """
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    report = b""
    while True:
        chunk = os.read(report_r, 4096)
        if not chunk:
            break
        report += chunk
    while True:
        try:
            os.waitpid(pid, 0)
            break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    lines = report.decode(errors="replace").splitlines()
    if not lines or lines[0] != "ok":
        message = lines[0] if lines else f"{FAILURE_MARKER} the child died in setup"
        os.write(2, (message + "\n").encode())
        os._exit(FAILURE_EXIT)
    try:
        keep()
    except OSError as exc:
        os.write(2, f"cuda_gym sandbox: could not keep the scratch's files: {exc}\n".encode())
    if len(lines) < 2 or not lines[1].startswith("exit "):
        os._exit(128 + signal.SIGKILL)  # PID 1 died without a report: it was killed
    code = int(lines[1].removeprefix("exit "))
    if code < 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        os._exit(128 - code)
    os._exit(1 if code == FAILURE_EXIT else code)


def encode_plan(plan: dict) -> str:
    """`plan` as one command-line argument of `main`."""
    return marshal.dumps(plan).hex()


def main(argv: list[str]) -> None:
    """`confine.py PLAN -- PROGRAM ARGS...`: confine, then exec the program."""
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: confine.py PLAN -- PROGRAM ARGS...\n")
        os._exit(2)
    try:
        confine(marshal.loads(bytes.fromhex(argv[0])))
    except (SetupError, ValueError, KeyError) as exc:
        sys.stderr.write(f"{FAILURE_MARKER} {exc}\n")
        os._exit(FAILURE_EXIT)
    os.execvp(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
