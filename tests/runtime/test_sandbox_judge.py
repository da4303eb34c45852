"""The judge runs candidate code in the OS sandbox: its daemons die, it changes nothing outside."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from cuda_gym.errors import ConfigError, SandboxError
from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.runtime.sandbox import check_support
from cuda_gym.tasks import builtin_task
from tests.solutions import TASK_ID, write_kernel_only_solution

# A static initialiser (it runs when the candidate's worker loads the library) that plants
# files outside its directory and leaves a setsid daemon that keeps planting them.
ATTACK = r"""#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace {
const char* kTargets[] = {TARGETS};

void plant() {
  for (const char* path : kTargets) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      (void)!write(fd, "planted\n", 8);
      close(fd);
    }
  }
}

__attribute__((constructor)) void attack() {
  plant();
  if (fork() == 0) {
    setsid();
    if (fork() == 0) {
      execl("/bin/sh", "MARKER", "-c", "while :; do SHELL_PLANT sleep 0.1; done", (char*)0);
    }
    _exit(0);
  }
}
}  // namespace
"""


def _tree_digest(root: Path) -> dict[str, str]:
    """SHA-256 of every file under `root` (names of entries that cannot be read)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            try:
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                out[str(path)] = "unreadable"
    return out


def _alive_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def _site_packages() -> Path:
    return Path(next(p for p in sys.path if p.endswith("site-packages")))


@pytest.mark.slow
@pytest.mark.parametrize("forked", [False, True], ids=["exec", "zygote"])
def test_a_daemon_dies_and_nothing_outside_scratch_changes(tmp_path: Path, forked: bool):
    try:
        check_support("cpu")
    except SandboxError as exc:
        pytest.skip(f"no sandbox on this machine: {exc}")
    marker = f"cuda_gym_planted_{os.getpid()}_{int(forked)}"
    cache = tmp_path / "cache"
    (cache / "baselines").mkdir(parents=True)
    (cache / "baselines" / "other_task.json").write_text("sealed elsewhere\n")
    other_ws = Path("/tmp") / f"cuda_gym_ws_{marker}"  # another episode's workspace
    other_ws.mkdir()
    (other_ws / "model_new.py").write_text("an honest neighbour\n")
    site = _site_packages()
    shm = Path("/dev/shm")
    targets = [
        cache / "baselines" / f"{marker}.json",
        cache / "baselines" / "other_task.json",
        site / f"{marker}.pth",
        shm / marker,
        other_ws / "model_new.py",
    ]
    source = (
        ATTACK.replace("TARGETS", ", ".join(f'"{t}"' for t in targets))
        .replace("SHELL_PLANT", " ".join(f"echo planted > {t};" for t in targets))
        .replace("MARKER", marker)
    )
    solution = write_kernel_only_solution(tmp_path / "solution", "cpu")
    (solution / "kernels" / "attack.cpp").write_text(source)

    before_cache = _tree_digest(cache)
    before_site = sorted(os.listdir(site))
    before_pth = {p.name: p.read_bytes() for p in site.glob("*.pth")}
    before_ws = _tree_digest(other_ws)
    try:
        judge = Judge(
            JudgeConfig(device="cpu", cache_dir=cache, fast_worker_start=forked, run_timeout_s=120)
        )
        verdict = judge.evaluate(builtin_task(TASK_ID).for_device("cpu"), solution, timing=False)
        alive = _alive_with(marker)
        after_cache = _tree_digest(cache)
        planted = [str(t) for t in targets if t.exists() and b"planted" in t.read_bytes()]
        assert _tree_digest(other_ws) == before_ws
    finally:
        for pid in _alive_with(marker):  # only if the sandbox failed: leave no daemon behind
            os.kill(pid, 9)
        for target in (site / f"{marker}.pth", shm / marker):
            target.unlink(missing_ok=True)
        for path in other_ws.iterdir():
            path.unlink()
        other_ws.rmdir()
    # The honest kernel, unharmed by its own attack: correct, unless the daemon's work between
    # forward's calls (a shell writing files) was sampled enough to be async_work (load).
    kinds = {v.split(":")[0] for v in verdict.violations}
    assert verdict.correct or kinds == {"async_work"}, verdict.error
    assert "unsandboxed" not in verdict.flags
    # forked: the runners too, from the fork server (cuda_gym.runtime.fork_server), confined
    assert bool(verdict.flags.get("runners_forked")) == forked
    assert alive == []
    assert planted == []
    # The judge's own cache writes (build, probe) are new files; nothing there changed.
    assert {k: v for k, v in after_cache.items() if k in before_cache} == before_cache
    assert sorted(os.listdir(site)) == before_site
    assert {p.name: p.read_bytes() for p in site.glob("*.pth")} == before_pth


def test_an_unsandboxed_verdict_says_so(tmp_path: Path, monkeypatch):
    solution = tmp_path / "solution"
    solution.mkdir()
    (solution / "model_new.py").write_text("import os\nclass ModelNew: pass\n")  # static reject
    task = builtin_task(TASK_ID).for_device("cpu")
    verdict = Judge(JudgeConfig(device="cpu", cache_dir=tmp_path, sandbox=False)).evaluate(
        task, solution, timing=False
    )
    assert verdict.verdict == "reject" and verdict.flags["unsandboxed"] is True
    monkeypatch.setenv("CUDA_GYM_UNSANDBOXED", "1")
    assert not JudgeConfig().sandboxed and JudgeConfig(sandbox=True).sandboxed
    monkeypatch.setenv("CUDA_GYM_UNSANDBOXED", "maybe")
    with pytest.raises(ConfigError, match="CUDA_GYM_UNSANDBOXED"):
        JudgeConfig()
    monkeypatch.delenv("CUDA_GYM_UNSANDBOXED")
    sandboxed = Judge(JudgeConfig(device="cpu", cache_dir=tmp_path)).evaluate(
        task, solution, timing=False
    )
    assert "unsandboxed" not in sandboxed.flags


def test_a_workers_files_are_read_only_as_regular_files(tmp_path: Path):
    from cuda_gym.judge.judge import _read_result, _read_stage

    fifo = tmp_path / "result.json"
    os.mkfifo(fifo)  # reading it would block the judge forever
    assert _read_result(fifo) is None
    secret = tmp_path / "judge_file.json"
    secret.write_text('{"ok": true}')
    link = tmp_path / "linked.json"
    link.symlink_to(secret)
    assert _read_result(link) is None
    assert _read_result(secret) == {"ok": True}
    (tmp_path / "list.json").write_text("[1, 2]")
    assert _read_result(tmp_path / "list.json") is None
    (tmp_path / "big.stage").write_text("x" * 1000)
    assert _read_stage(tmp_path / "big.stage") is None
    assert _read_result(tmp_path / "missing") is None
