"""Stress: 9 concurrent CPU episodes, a third with crashing or hanging kernels, leave nothing.

Every episode writes its files and submits from one of 8 threads sharing the judge slots.
Good episodes use the demo's C++ kernel; bad ones call `hang`, `segfault` or `underscore_exit`
from benchmarks/exploits/kernels_cpu/exploits.cpp. Identical kernels build once (the build
cache is keyed by content). Afterwards no child process and no workspace, judge or temporary
directory may remain. `CUDA_GYM_STRESS_EPISODES` changes the number of episodes (each judged
with the OS sandbox, about 10 per minute on a 2-core machine).
"""

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest

import cuda_gym  # noqa: F401  (registers CudaKernel-v0)
import cuda_gym.judge.judge as judge_module
from cuda_gym.demo import CPU_KERNEL, MODEL_NEW
from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.runtime.zygote import close_shared_launchers
from cuda_gym.tasks import load_task
from tests.solutions import TASK_ID

EXPLOITS_CPP = Path(__file__).parent.parent / "benchmarks/exploits/kernels_cpu/exploits.cpp"
# exploits.cpp registers the sandbox attacks too: their file is built beside it.
SANDBOX_ATTACKS_CPP = EXPLOITS_CPP.parents[1] / "kernels_common/sandbox_attacks.cpp"
BAD_FUNCTIONS = ("hang", "segfault", "underscore_exit")
BAD_MODEL_NEW = """import kernels_ext
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.gate_bias = nn.Parameter(torch.empty(hidden_size))

    def forward(self, x, gate):
        return kernels_ext.{name}(x, gate, self.gate_bias)
"""


def episode_files(index: int) -> tuple[str, dict[str, str]]:
    """Every third episode is bad, cycling through the dying and hanging kernels."""
    if index % 3 == 2:
        name = BAD_FUNCTIONS[(index // 3) % len(BAD_FUNCTIONS)]
        files = {
            "kernels/exploits.cpp": EXPLOITS_CPP.read_text(),
            "kernels/sandbox_attacks.cpp": SANDBOX_ATTACKS_CPP.read_text(),
        }
        return name, files | {"model_new.py": BAD_MODEL_NEW.format(name=name)}
    return "good", {"kernels/gated.cpp": CPU_KERNEL, "model_new.py": MODEL_NEW}


def child_processes_in(root: Path) -> list[int]:
    """Processes that are children of this one, or whose working directory is under root."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cwd = os.readlink(entry / "cwd")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() or cwd.startswith(str(root)):
            found.append(int(entry.name))
    return found


def _is_zygote(pid: int) -> bool:
    try:
        return b"cuda_gym.runtime.zygote" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _children_of(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        return [int(c) for t in tasks for c in (t / "children").read_text().split()]
    except OSError:
        return []


@pytest.mark.slow
def test_concurrent_episodes_with_crashes_and_hangs_all_end_and_leave_nothing(
    tmp_path, monkeypatch
):
    n_episodes = int(os.environ.get("CUDA_GYM_STRESS_EPISODES", "9"))
    workspaces, scratch, tmp = tmp_path / "ws", tmp_path / "judge", tmp_path / "tmp"
    for path in (workspaces, scratch, tmp):
        path.mkdir()
    # Judge scratch (normally /dev/shm) and temporary files go where this test can check them.
    monkeypatch.setattr(judge_module, "_scratch_dir", lambda: str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TMPDIR", str(tmp))
    # Processes from earlier tests (e.g. Ray's, not yet reaped) are not this test's concern.
    before = set(child_processes_in(tmp_path))
    # The task probe is cached per task; run it once under the default time limit.
    Judge(JudgeConfig(device="cpu")).probe_task(load_task(TASK_ID))
    judge = JudgeConfig(
        device="cpu",
        run_timeout_s=30,  # a good episode needs headroom on a loaded 2-core machine
        timed_runs=2,
        warmup_runs=0,
        correctness_trials=2,
        baselines=("eager",),
    )

    def episode(index: int) -> tuple[str, float, dict]:
        kind, files = episode_files(index)
        env = gym.make(
            "CudaKernel-v0",
            device="cpu",
            task=TASK_ID,
            judge=judge,
            workspace_dir=str(workspaces),
            timed_judge_slots=2,
        )
        try:
            env.reset(seed=index)
            writes = [
                {"name": "write_file", "arguments": {"path": p, "content": c}}
                for p, c in files.items()
            ]
            env.step(writes)
            _, reward, terminated, _, info = env.step({"name": "submit", "arguments": {}})
            assert terminated and info["stop_reason"] == "submit"
            return kind, reward, info["verdict"]
        finally:
            env.close()

    start = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(episode, range(n_episodes)))
    elapsed = time.monotonic() - start
    print(f"{n_episodes} episodes in {elapsed:.1f} s ({60 * n_episodes / elapsed:.1f}/min)")

    assert len(results) == n_episodes
    for kind, reward, verdict in results:
        if kind == "good":
            assert reward >= 1, verdict["error"]
        else:
            assert reward == -1 and not verdict["correct"]
            expected = "timed out" if kind == "hang" else "process"
            assert expected in verdict["error"], (kind, verdict["error"])
    assert {kind for kind, *_ in results} >= {"good", *BAD_FUNCTIONS} or n_episodes < 9
    # The warm zygote the judge forks its workers from may stay, but with no child left.
    new = [p for p in child_processes_in(tmp_path) if p not in before]
    zygotes = [p for p in new if _is_zygote(p)]
    assert [p for p in new if p not in zygotes] == []
    assert all(_children_of(z) == [] for z in zygotes)
    close_shared_launchers()
    assert [p for p in child_processes_in(tmp_path) if p not in before] == []
    assert list(workspaces.iterdir()) == []
    assert list(scratch.iterdir()) == []
    assert list(tmp.iterdir()) == []
