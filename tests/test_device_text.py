"""Device-aware text: the CPU env shows only CPU things, the CUDA env only CUDA ones."""

import gymnasium as gym
import pytest

from cuda_gym.skills import skills_for_device, text_for_device
from cuda_gym.tasks import builtin_task, builtin_task_ids


@pytest.mark.parametrize("task_id", builtin_task_ids())
def test_cpu_task_statements_have_no_gpu_timing_comments(task_id):
    task = builtin_task(task_id)
    cpu = task.for_device("cpu")
    assert "H200" not in cpu.source and "HBM" not in cpu.source
    assert cpu.content_hash == task.for_device("cuda").content_hash or "CPU_SIZES" in task.source
    assert "H200" in task.for_device("cuda").source


def test_device_blocks_are_kept_for_their_device_only():
    text = "a\n<!-- cuda -->\ncuda only\n<!-- /cuda -->\n<!-- cpu -->\ncpu only\n<!-- /cpu -->\nz\n"
    assert text_for_device(text, "cuda") == "a\ncuda only\nz\n"
    assert text_for_device(text, "cpu") == "a\ncpu only\nz\n"


@pytest.mark.parametrize(
    ("device", "absent", "present"),
    [
        ("cpu", ['read_skill("cuda-hopper")', "__global__", "getCurrentCUDAStream", "<!--"], []),
        ("cuda", ['read_skill("cpp-cpu")', "<!--"], ['read_skill("cuda-hopper")', "__global__"]),
    ],
)
def test_the_workspace_skill_mentions_only_its_device(device, absent, present):
    skills = {s.name: s for s in skills_for_device(device)}
    assert "<!--" not in "".join(s.text for s in skills.values())
    text = skills["workspace"].text
    for fragment in absent:
        assert fragment not in text
    for fragment in present:
        assert fragment in text


def test_the_cpu_env_statement_and_skill_files_are_cpu_only():
    env = gym.make("CudaKernel-v0", device="cpu", task="sigmoid_gated_multiply")
    try:
        obs, _ = env.reset(seed=0)
        assert "H200" not in obs and "cuda-hopper" not in obs
        skill = (env.unwrapped.workspace.root / "skills" / "workspace" / "SKILL.md").read_text()
        assert 'read_skill("cpp-cpu")' in skill and "cuda-hopper" not in skill
    finally:
        env.close()


def test_the_profiling_skill_on_the_cpu_has_no_gpu_passages():
    cpu = {s.name: s for s in skills_for_device("cpu")}["profiling"].text
    cuda = {s.name: s for s in skills_for_device("cuda")}["profiling"].text
    for fragment in ("__global__", "CUDA events", "H200", "threadIdx"):
        assert fragment not in cpu and fragment in cuda
    assert "host wall-clock" in cpu and "host wall-clock" not in cuda
