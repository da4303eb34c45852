"""The OS sandbox (cuda_gym.runtime.sandbox): what a tiny sandboxed program can and cannot do."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cuda_gym.errors import ConfigError, SandboxError
from cuda_gym.runtime import confine
from cuda_gym.runtime.sandbox import (
    SandboxSpec,
    build_plan,
    check_support,
    enter_sandbox,
    failure_message,
    sandbox_argv,
    sandbox_env,
)


@pytest.fixture(scope="module", autouse=True)
def _sandbox_works():
    try:
        check_support("cpu")
    except SandboxError as exc:
        pytest.skip(f"no sandbox on this machine: {exc}")


def run_sandboxed(code: str, scratch: Path, **spec_fields) -> subprocess.CompletedProcess:
    """Run `python -I -S -c code` in a sandbox whose scratch is `scratch`."""
    spec = SandboxSpec(scratch=scratch, **spec_fields)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    plan = build_plan(spec, env, scratch)
    argv = sandbox_argv([sys.executable, "-I", "-S", "-c", textwrap.dedent(code)], plan)
    return subprocess.run(
        argv, env=sandbox_env(env, spec), cwd=scratch, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    path = tmp_path / "scratch"
    path.mkdir()
    return path


def test_writes_only_into_scratch(tmp_path: Path, scratch: Path):
    other = tmp_path / "other_workspace"
    other.mkdir()
    (other / "model_new.py").write_text("honest\n")
    site = next(p for p in sys.path if p.endswith("site-packages"))
    proc = run_sandboxed(
        f"""
        import os
        open("mine.txt", "w").write("ok")
        results = []
        for path in ({str(other / "model_new.py")!r}, {site + "/evil.pth"!r}, "/etc/evil",
                     {os.path.dirname(confine.__file__) + "/evil.py"!r}, "/evil"):
            try:
                open(path, "w").write("x")
                results.append("wrote " + path)
            except OSError as exc:
                results.append(type(exc).__name__)
        open("/dev/shm/private", "w").write("x")  # a fresh tmpfs of its own
        print(results)
        """,
        scratch,
        keep=("mine.txt",),
    )
    assert proc.returncode == 0, proc.stderr
    assert "wrote" not in proc.stdout
    assert (scratch / "mine.txt").read_text() == "ok"
    assert (other / "model_new.py").read_text() == "honest\n"
    assert not Path(site, "evil.pth").exists()
    assert not Path("/dev/shm/private").exists()


def test_other_workspaces_are_invisible(tmp_path: Path, scratch: Path):
    other = tmp_path / "other_workspace"
    other.mkdir()
    (other / "secret.txt").write_text("secret")
    proc = run_sandboxed(
        f"import os; print(os.path.exists({str(other)!r}), sorted(os.listdir('/')))", scratch
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("False")
    assert "'home'" not in proc.stdout and "'var'" not in proc.stdout


def test_no_network_but_loopback(scratch: Path):
    proc = run_sandboxed(
        """
        import socket
        names = [l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]]
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(("1.1.1.1", 80))
            print(names, "connected")
        except OSError as exc:
            print(names, type(exc).__name__)
        """,
        scratch,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("['lo']") and "connected" not in proc.stdout


def test_unprivileged_and_filtered(scratch: Path):
    proc = run_sandboxed(
        """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        def errno_of(ret):
            return ctypes.get_errno() if ret == -1 else 0
        caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Cap")]
        print("uid", os.getuid(), "caps", caps)
        print("ptrace", errno_of(libc.ptrace(0, 0, None, None)))  # PTRACE_TRACEME
        print("unshare", errno_of(libc.unshare(0x00020000)))
        print("mount", errno_of(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
        print("bpf", errno_of(libc.syscall(321 if os.uname().machine == "x86_64" else 280,
                                           0, None, 0)))
        print("pid", os.getpid())
        """,
        scratch,
    )
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    if os.geteuid() == 0:
        assert not lines["uid"].startswith("0 ")
    assert set(lines["uid"].split("caps ")[1].strip("[]").replace("'", "").split(", ")) == {
        "0000000000000000"
    }
    for call in ("ptrace", "unshare", "mount", "bpf"):
        assert lines[call] == "1", f"{call} was not refused with EPERM: {proc.stdout}"
    assert lines["pid"] == "2"  # PID 1 is the namespace's init


def _alive_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def test_daemons_die_with_the_sandbox(scratch: Path):
    marker = f"cuda_gym_daemon_marker_{os.getpid()}"
    proc = run_sandboxed(
        f"""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-S", "-c",
                         "import time; time.sleep(600)", {marker!r}])
            os._exit(0)
        time.sleep(0.5)
        print("parent done")
        """,
        scratch,
    )
    assert proc.returncode == 0, proc.stderr
    assert _alive_with(marker) == []


def test_exit_status_passes_through_and_cannot_fake_a_setup_failure(scratch: Path):
    assert run_sandboxed("raise SystemExit(7)", scratch).returncode == 7
    faked = run_sandboxed(
        f"import sys; sys.stderr.write({confine.FAILURE_MARKER!r} + ' x\\n'); "
        f"raise SystemExit({confine.FAILURE_EXIT})",
        scratch,
    )
    assert faked.returncode == 1
    assert failure_message(faked.returncode, faked.stderr) is None
    killed = run_sandboxed("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", scratch)
    assert killed.returncode != 0


def test_setup_failure_is_reported(scratch: Path):
    plan = build_plan(SandboxSpec(scratch=scratch), {}, scratch)
    plan["cwd"] = "/no/such/directory"
    argv = [sys.executable, "-I", "-S", confine.__file__, confine.encode_plan(plan), "--", "true"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == confine.FAILURE_EXIT
    message = failure_message(proc.returncode, proc.stderr)
    assert message and "/no/such/directory" in message and "CUDA_GYM_UNSANDBOXED" in message


def test_enter_sandbox_in_a_forked_child(scratch: Path, tmp_path: Path):
    outside = tmp_path / "outside.txt"
    plan = build_plan(SandboxSpec(scratch=scratch, keep=("inside.txt",)), os.environ, scratch)
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            enter_sandbox(plan)
            (scratch / "inside.txt").write_text(str(os.getpid()))
            try:
                outside.write_text("escaped")
                code = 3
            except OSError:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (scratch / "inside.txt").read_text() == "2"
    assert not outside.exists()


def test_scratch_is_a_bounded_private_copy(scratch: Path):
    (scratch / "given.txt").write_text("from the judge")
    proc = run_sandboxed(
        """
        import errno, os
        print(open("given.txt").read())
        open("given.txt", "w").write("changed")
        chunk = b"x" * (1 << 20)
        for where in (".", "/tmp", "/dev/shm"):
            try:
                with open(f"{where}/fill", "wb") as f:
                    for _ in range(64):
                        f.write(chunk)
                        f.flush()
                print(where, "no limit")
            except OSError as exc:
                print(where, errno.errorcode[exc.errno])
            os.remove(f"{where}/fill")
        written = 0
        try:
            for i in range(64):
                open(f"many{i}", "wb").write(chunk)
                written += 1
        except OSError as exc:
            print("many", errno.errorcode[exc.errno], written)
        """,
        scratch,
        tmpfs_bytes=16 << 20,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "from the judge"
    assert lines[1:4] == [". ENOSPC", "/tmp ENOSPC", "/dev/shm ENOSPC"]
    assert lines[4].startswith("many ENOSPC") and int(lines[4].split()[2]) <= 16
    # Nothing it wrote reached the real directory: no keep was asked for.
    assert sorted(p.name for p in scratch.iterdir()) == ["given.txt"]
    assert (scratch / "given.txt").read_text() == "from the judge"


def test_the_judges_shared_objects_in_scratch_cannot_be_changed(scratch: Path):
    ext = scratch / "torch_extensions" / "ext"
    ext.mkdir(parents=True)
    (ext / "ext.so").write_bytes(b"\x7fELF built by the judge")
    proc = run_sandboxed(
        """
        import errno, os
        path = "torch_extensions/ext/ext.so"
        print(open(path, "rb").read()[4:])
        for attempt in (lambda: open(path, "r+b"), lambda: os.chmod(path, 0o755)):
            try:
                attempt()
                print("changed")
            except OSError as exc:
                print(errno.errorcode[exc.errno])
        os.replace(path, "torch_extensions/ext/old.so")  # a new file in its place is possible
        open(path, "wb").write(b"other")
        print(open(path, "rb").read())
        """,
        scratch,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "b' built by the judge'"
    if os.geteuid() == 0:  # a uid of its own: the judge's file is not its to change
        assert lines[1:3] == ["EACCES", "EPERM"]
    assert lines[3] == "b'other'"


def test_keep_copies_back_files_and_directories_only(scratch: Path, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("judge's")
    proc = run_sandboxed(
        f"""
        import os
        os.makedirs("out/deep")
        open("out/deep/result.json", "w").write("{{}}")
        os.symlink({str(secret)!r}, "out/link")
        os.symlink("/etc/passwd", "linked.txt")
        os.mkfifo("out/fifo")
        open("report.json", "w").write("[1]")
        open("dropped.txt", "w").write("not kept")
        """,
        scratch,
        keep=("out", "report.json", "linked.txt", "absent"),
    )
    assert proc.returncode == 0, proc.stderr
    assert (scratch / "out/deep/result.json").read_text() == "{}"
    assert (scratch / "report.json").read_text() == "[1]"
    for name in ("out/link", "out/fifo", "linked.txt", "dropped.txt", "absent"):
        assert not os.path.lexists(scratch / name), name
    assert secret.read_text() == "judge's"


def test_keep_leaves_sparse_and_oversized_files_behind(scratch: Path):
    # A GiB of holes costs nothing in the box's tmpfs and a GiB once copied out.
    proc = run_sandboxed(
        """
        import os
        os.makedirs("out/junk")
        with open("out/junk/junk.so", "wb") as f:
            f.truncate(1 << 30)
        open("out/real.so", "wb").write(b"x" * 100_000)
        """,
        scratch,
        keep=("out",),
    )
    assert proc.returncode == 0, proc.stderr
    assert (scratch / "out/real.so").stat().st_size == 100_000
    assert not (scratch / "out/junk/junk.so").exists()


def test_keep_spends_a_byte_budget(tmp_path: Path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    for name in "abc":
        (src / name).write_bytes(b"y" * 4000)
    fds = [os.open(d, os.O_RDONLY | os.O_DIRECTORY) for d in (src, dst)]
    try:
        budget = [9000]
        confine._copy_tree(*fds, None, budget=budget)
    finally:
        for fd in fds:
            os.close(fd)
    assert len(list(dst.iterdir())) == 2 and budget == [1000]


def test_spec_refuses_a_writable_system_directory(scratch: Path):
    with pytest.raises(ConfigError, match="holds system files"):
        build_plan(SandboxSpec(scratch=Path("/usr")), {}, scratch)
    with pytest.raises(ConfigError, match="absolute"):
        SandboxSpec(scratch=Path("relative"))
    (scratch / "inner").mkdir()
    with pytest.raises(ConfigError, match="in the scratch directory"):
        build_plan(SandboxSpec(scratch=scratch, readable=(str(scratch / "inner"),)), {}, scratch)
    with pytest.raises(ConfigError, match="names in scratch"):
        SandboxSpec(scratch=scratch, keep=("../escape",))


@pytest.mark.parametrize("machine", sorted(confine.ARCHES))
def test_seccomp_program_fits_bpf(machine: str):
    program = confine.seccomp_program(machine)
    assert len(program) % 8 == 0 and len(program) // 8 < 256
