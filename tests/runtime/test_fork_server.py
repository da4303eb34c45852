"""The fork server of runners: what a forked child gets, keeps and loses, and its failures."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_gym.errors import SandboxError
from cuda_gym.runtime.fork_server import (
    FIRST_FD,
    ForkRefused,
    ForkServer,
    fork_process,
)
from cuda_gym.runtime.sandbox import SandboxSpec, build_plan, check_support, sandbox_env

CHILD = r"""
import gc, json, os, sys, socket
sock = socket.socket(fileno=int(sys.argv[1]))
frames, frame = [], sys._getframe()
while frame is not None:
    frames.append((frame.f_code.co_filename, frame.f_code.co_name, sorted(frame.f_locals)))
    frame = frame.f_back
report = {
    "argv": sys.argv,
    "cwd": os.getcwd(),
    "env": dict(os.environ),
    "modules": sorted(m for m in sys.modules if m.startswith("cuda_gym")),
    "torch": "torch" in sys.modules,
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "frames": frames,
    "session": os.getsid(0) == os.getpid(),
    "hash": hash("cuda_gym"),
}
sock.sendall(json.dumps(report).encode())
print("to the log", flush=True)
mode = sys.argv[2]
if mode == "sleep":
    import time
    time.sleep(300)
sys.exit(7)
"""


@pytest.fixture(scope="module")
def server():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONHASHSEED"] = "0"
    served = ForkServer(env, ["-s"])
    if served.address() is None:
        pytest.fail(f"the fork server did not start: {served.failure}")
    yield served
    served.close()


def _fork(server, tmp_path: Path, mode: str, env=None):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    ours, theirs = socket.socketpair()
    log = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        proc = fork_process(
            server.address(),
            script,
            [str(FIRST_FD), mode],
            cwd=tmp_path,
            env=env or {"MARK": "set", "PATH": os.environ.get("PATH", "")},
            fds=(theirs.fileno(), log),
        )
    finally:
        theirs.close()
        os.close(log)
    ours.settimeout(60)
    data = b""
    while True:  # the whole report (the child sends it, then goes on)
        chunk = ours.recv(1 << 16)
        data += chunk
        try:
            return proc, json.loads(data), ours
        except ValueError:
            assert chunk, f"the child closed its socket: {data[-200:]!r}"


def test_a_forked_child_gets_its_request_and_nothing_of_the_server(server, tmp_path):
    proc, report, sock = _fork(server, tmp_path, "exit")
    assert proc.wait(60) == 7
    assert report["argv"] == [str(tmp_path / "child.py"), "3", "exit"]
    assert report["cwd"] == str(tmp_path)
    assert report["env"]["MARK"] == "set" and "PYTHONHASHSEED" not in report["env"]
    assert report["modules"] == []  # no module of cuda_gym left in sys.modules
    assert report["torch"]  # what the server imported for it
    assert report["fds"][:4] == [0, 1, 2, 3] and len(report["fds"]) == 5  # (+ listdir's own)
    assert report["session"]
    # The hash seed of the server (started as a runner is, PYTHONHASHSEED=0)
    seeded = subprocess.run(
        [sys.executable, "-c", "print(hash('cuda_gym'))"],
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
    )
    assert report["hash"] == int(seeded.stdout)
    # No frame of the server's loop is on the child's stack: only its entry point, which
    # holds the child's own request (and the module's, which holds its functions).
    server_frames = [f for f in report["frames"] if f[0].endswith("fork_server.py")]
    assert [name for _, name, _ in server_frames] == ["_run", "main", "<module>"]
    assert all("listener" not in names and "children" not in names for *_, names in server_frames)
    assert "to the log" in (tmp_path / "log").read_text()
    sock.close()


CONFINED = r"""
import json, os, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
try:
    with open("/proc/self/mem", "rb"):
        mem = "opened"
except OSError as exc:
    mem = repr(exc)
report = {"pid": os.getpid(), "uid": os.getuid(), "mem": mem, "home": os.listdir("/tmp")}
sock.sendall(json.dumps(report).encode())
"""


def test_a_confined_child_is_in_its_sandbox_and_dumpable_as_an_execd_one(server, tmp_path):
    try:
        check_support("cpu")
    except SandboxError as exc:
        pytest.skip(f"no sandbox here: {exc}")
    code = tmp_path / "code"
    scratch = tmp_path / "scratch"
    code.mkdir()
    scratch.mkdir()
    (code / "child.py").write_text(CONFINED)
    spec = SandboxSpec(scratch=scratch, readable=(str(code),))
    env = sandbox_env({"PATH": os.environ.get("PATH", "")}, spec)
    ours, theirs = socket.socketpair()
    log = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        proc = fork_process(
            server.address(),
            code / "child.py",
            [str(FIRST_FD)],
            cwd=scratch,
            env=env,
            fds=(theirs.fileno(), log),
            sandbox=build_plan(spec, env, scratch),
        )
    finally:
        theirs.close()
        os.close(log)
    ours.settimeout(60)
    report = json.loads(ours.recv(1 << 16))
    assert proc.wait(60) == 0, (tmp_path / "log").read_text()
    assert report["pid"] == 2  # PID 2 of its own PID namespace, under the sandbox's init
    if os.geteuid() == 0:
        assert report["uid"] != 0  # a fresh uid of its own
    assert report["mem"] == "opened"  # (a change of user without exec leaves a process not)
    assert str(tmp_path.name) not in report["home"]  # a /tmp of its own
    ours.close()


def test_a_driver_that_goes_away_takes_its_child_with_it(server, tmp_path):
    proc, report, sock = _fork(server, tmp_path, "sleep")
    pid = proc.pid
    proc.conn.close()  # the driver's end of its request: gone
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid)
    sock.close()


def test_the_driver_kills_its_child_by_its_group_and_reads_the_signal(server, tmp_path):
    proc, _, sock = _fork(server, tmp_path, "sleep")
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.2)
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    sock.close()


def test_a_dead_server_refuses_and_its_children_do_not_outlive_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    served = ForkServer(env)
    address = served.address()
    proc, _, sock = _fork(served, tmp_path, "sleep")
    served.close()  # stops the server: it kills what it started
    assert proc.wait(30) == -signal.SIGKILL
    assert not _alive(proc.pid)
    with pytest.raises(ForkRefused):
        fork_process(address, tmp_path / "child.py", [], cwd=tmp_path, env={})
    sock.close()


def test_a_server_that_exits_before_it_is_ready_is_not_used(tmp_path, caplog):
    served = ForkServer({"PATH": os.environ.get("PATH", "")}, ["-c", "raise SystemExit(3)", "--"])
    with caplog.at_level("WARNING", logger="cuda_gym.runtime.fork_server"):
        assert served.address() is None and "failed to start" in served.failure
    assert "they start afresh" in caplog.text  # said once, where it happened


def test_a_server_whose_first_child_cannot_use_its_device_is_not_used():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["CUDA_VISIBLE_DEVICES"] = ""  # (no GPU for it, here or on a GPU machine)
    served = ForkServer(env, device="cuda")
    try:
        assert served.address() is None
        assert "first child (cuda) failed" in served.failure
        assert served.address() is None  # not started again
    finally:
        served.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
