"""Runners forked by the fork server on a real GPU: CUDA starts in them, confined or not, and a
judgement with forked runners is judged as one with runners started afresh.
Run with: python -m pytest -m gpu"""

import json
import os
import socket

import pytest

from cuda_gym.errors import SandboxError
from cuda_gym.judge.untrusted import runner_env_for, runner_python_flags
from cuda_gym.runtime import python_child_env
from cuda_gym.runtime.fork_server import FIRST_FD, ForkServer, fork_process
from cuda_gym.runtime.sandbox import SandboxSpec, build_plan, check_support, sandbox_env

pytestmark = pytest.mark.gpu

CHILD = r"""
import json, os, socket, sys
import torch
sock = socket.socket(fileno=int(sys.argv[1]))
x = torch.arange(1024, device="cuda", dtype=torch.float32)
sock.sendall(json.dumps({"sum": float(x.sum()), "pid": os.getpid()}).encode())
"""


@pytest.mark.parametrize("confined", [False, True], ids=["plain", "sandboxed"])
def test_a_forked_runner_starts_cuda(confined, tmp_path):
    if confined:
        try:
            check_support("cuda")
        except SandboxError as exc:
            pytest.skip(f"no sandbox here: {exc}")
    env = runner_env_for(python_child_env())
    server = ForkServer(env, runner_python_flags(), device="cuda")
    try:
        assert server.address() is not None, server.failure  # its CUDA probe ran
        code, scratch = tmp_path / "code", tmp_path / "scratch"
        code.mkdir()
        scratch.mkdir()
        (code / "child.py").write_text(CHILD)
        plan, child_env = None, dict(env)
        if confined:
            spec = SandboxSpec(scratch=scratch, device="cuda", readable=(str(code),))
            child_env = sandbox_env(env, spec)
            plan = build_plan(spec, child_env, scratch)
        ours, theirs = socket.socketpair()
        log = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            proc = fork_process(
                server.address(),
                code / "child.py",
                [str(FIRST_FD)],
                cwd=scratch,
                env=child_env,
                fds=(theirs.fileno(), log),
                sandbox=plan,
            )
        finally:
            theirs.close()
            os.close(log)
        ours.settimeout(120)
        report = json.loads(ours.recv(1 << 16))
        assert proc.wait(120) == 0, (tmp_path / "log").read_text()
        assert report["sum"] == 1023 * 1024 / 2
        assert (report["pid"] == 2) == confined  # PID 2 of its own namespace when confined
    finally:
        server.close()
