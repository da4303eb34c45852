"""CudaKernelEnv's contract: episodes, budgets, actions and errors (a scripted judge: no builds).

The real judge's episodes (a C++ kernel built and judged on the CPU) are in test_env_real.py
(marked slow).
"""

import asyncio
import json
import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import cuda_gym
from cuda_gym.demo import CPU_KERNEL, MODEL_NEW
from cuda_gym.errors import ConfigError, EnvStateError
from cuda_gym.judge import JudgeConfig
from tests.fakes import ScriptedJudge
from tests.solutions import TASK_ID


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


def make_env(**kwargs):
    kwargs.setdefault("judge", ScriptedJudge("cpu"))
    kwargs.setdefault("task", TASK_ID)
    return gym.make("CudaKernel-v0", device="cpu", **kwargs)


@pytest.fixture
def env():
    env = make_env()
    env.reset(seed=0)
    yield env
    env.close()


def write_solution(env, kernel=CPU_KERNEL, model_new=MODEL_NEW, name="kernels/gated.cpp"):
    obs, *_ = env.step(
        [
            call("write_file", path=name, content=kernel),
            call("write_file", path="model_new.py", content=model_new),
        ]
    )
    assert "Created" in obs or "Overwrote" in obs


@pytest.mark.parametrize("env_id", sorted(i for i in gym.registry if i.startswith("CudaKernel")))
def test_env_checker_passes_on_every_registered_id(env_id):
    env = gym.make(env_id, device="cpu", judge=ScriptedJudge("cpu"))
    check_env(env.unwrapped)
    env.close()


def test_registered_with_nondeterministic_and_module_prefix():
    spec = gym.spec("CudaKernel-v0")
    assert spec.nondeterministic is True
    code = (
        "import gymnasium as gym; "
        "env = gym.make('cuda_gym:CudaKernel-v0', device='cpu'); "
        "obs, info = env.reset(seed=1); print(info['task_id']); env.close()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in cuda_gym.tasks.resolve_task_source("auto").ids()


def test_reset_observation_and_info(env):
    obs, info = env.reset(seed=3, options={"task_id": "row_softmax"})
    assert info["task_id"] == "row_softmax" and info["device"] == "cpu"
    assert "class Model" in obs and "## Skills" in obs and "workspace:" in obs
    assert {t["function"]["name"] for t in info["tools"]} == {
        "list_files",
        "read_file",
        "write_file",
        "edit_file",
        "compile",
        "run",
        "profile",
        "read_skill",
        "submit",
    }
    assert {s["name"] for s in info["skills"]} == {"workspace", "profiling", "cpp-cpu"}


def test_same_seed_gives_the_same_task():
    env = make_env(task=None)
    ids = [env.reset(seed=s)[1]["task_id"] for s in (7, 8, 7)]
    env.close()
    assert ids[0] == ids[2]


def test_full_episode_with_a_correct_kernel_earns_a_reward(env):
    write_solution(env)
    obs, reward, terminated, truncated, info = env.step(call("compile"))
    assert "Build OK" in obs and reward == 0 and not terminated
    obs, reward, *_, info = env.step(call("run"))
    assert obs.startswith("PASS") and info["tool_results"][0]["correct"] is True
    obs, reward, *_, info = env.step(call("profile"))
    assert "speedup" in obs and "Milestone reward" in obs
    obs, reward, terminated, truncated, info = env.step(call("submit"))
    assert terminated and not truncated and info["stop_reason"] == "submit"
    assert reward == 3 and info["reward_components"]["correct"] is True
    assert info["best"]["reward"] == 3
    judge = env.unwrapped.judge
    assert [(kind, timing) for kind, _, timing in judge.calls] == [
        ("build", False),
        ("evaluate", False),
        ("evaluate", True),
        ("evaluate", True),
    ]
    assert judge.calls[-1][1]["model_new.py"] == MODEL_NEW
    with pytest.raises(EnvStateError, match="call reset"):
        env.step(call("list_files"))


def test_wrong_kernel_earns_minus_one(env):
    write_solution(env, model_new=MODEL_NEW + "\n# WRONG\n")
    obs, reward, terminated, _, info = env.step(call("submit"))
    assert terminated and reward == -1 and info["reward_components"]["correct"] is False
    assert "Incorrect output" in obs


def test_compile_errors_reach_the_observation(env):
    env.step(call("write_file", path="kernels/broken.cpp", content="#error no kernel yet\n"))
    obs, reward, *_, info = env.step(call("compile"))
    assert "Build FAILED" in obs and "kernels/broken.cpp:1" in obs
    assert info["tool_results"][0]["ok"] is False


def test_a_crashed_candidate_is_an_observation_and_the_next_episode_works(env):
    write_solution(env, model_new=MODEL_NEW + "\n# CRASH\n")
    obs, *_ = env.step(call("run"))
    assert obs.startswith("FAIL") and "SIGSEGV" in obs
    env.reset(seed=1)
    write_solution(env)
    obs, reward, terminated, *_ = env.step(call("submit"))
    assert terminated and reward == 3


@pytest.mark.parametrize(
    ("action", "fragment"),
    [
        ("I will now write the kernel.", "No tool call found"),
        ('<tool_call>{"name": "run", "arguments": {</tool_call>', "invalid JSON"),
        ("<tool_call>" + json.dumps(call("fly")) + "</tool_call>", "Unknown tool 'fly'"),
        ({"name": "read_file", "arguments": {}}, "missing required argument(s) path"),
        ({"name": "read_file", "arguments": {"path": "model.py", "mode": "x"}}, "unknown argument"),
        (12345, "expected a string or a tool call"),
        (None, "expected a string or a tool call"),
        (bytes(range(256)).decode("latin-1") * 50, "No tool call found"),
        ("x" * 1_000_001, "characters"),
    ],
)
def test_malformed_actions_never_raise_and_are_counted(env, action, fragment):
    obs, reward, terminated, truncated, info = env.step(action)
    assert fragment in obs
    assert info["invalid_action"] is True and info["invalid_action_count"] == 1
    assert reward == 0 and not terminated and not truncated


def test_too_many_invalid_actions_truncate_and_judge_the_workspace():
    env = make_env(max_invalid_actions=2)
    env.reset(seed=0)
    env.step("no tool call here")
    obs, reward, terminated, truncated, info = env.step("still none")
    assert truncated and not terminated and info["stop_reason"] == "invalid_actions"
    assert reward == -1  # the untouched template is not a solution
    env.close()


@pytest.mark.parametrize(
    "action",
    [
        [call("read_file", path="a" * 300)],  # a name too long for the file system
        [  # a path through a file
            call("write_file", path="kernels/a.cpp", content="int a;\n"),
            call("write_file", path="kernels/a.cpp/b.cpp", content="int b;\n"),
        ],
        [call("write_file", path="kernels/k.cpp", content="int x; // \ud800")],
        [call("write_file", path="kernels/\ud800.cpp", content="int x;\n")],
        [call("read_file", path="model.py", start_line="--1")],
        [call("read_file", path="model.py", start_line="\u00b2")],
    ],
    ids=["long_name", "file_as_dir", "surrogate", "surrogate_path", "--1", "sup2"],
)
def test_a_call_whose_arguments_break_its_tool_is_an_invalid_action(env, action):
    """Found by a red team: each raised out of env.step before."""
    obs, reward, terminated, truncated, info = env.step(action)
    assert "Error:" in obs and "invalid actions" in obs
    assert reward == 0 and not terminated and not truncated


def test_max_turns_truncates_and_judges_the_last_state():
    env = make_env(max_turns=2)
    env.reset(seed=0)
    write_solution(env)
    obs, reward, terminated, truncated, info = env.step(call("list_files"))
    assert truncated and info["stop_reason"] == "max_turns"
    assert reward == 3 and info["verdict"]["correct"] is True
    assert "Episode truncated (max_turns)" in obs
    env.close()


def test_file_tools(env):
    obs, *_, info = env.step(call("read_file", path="model.py", start_line=1, end_line=3))
    assert obs.startswith("model.py (lines 1-3 of")
    obs, *_ = env.step(call("write_file", path="model.py", content="hacked"))
    assert "read-only" in obs
    env.step(call("write_file", path="kernels/a.cpp", content="int a = 1;\nint b = 1;\n"))
    obs, *_ = env.step(
        call(
            "edit_file",
            path="kernels/a.cpp",
            edits=[{"old": "a = 1", "new": "a = 2"}, {"old": "= 1", "new": "= 3"}],
        )
    )
    assert "Applied 2 edit(s)" in obs
    obs, *_ = env.step(
        call(
            "edit_file",
            path="kernels/a.cpp",
            edits=[{"old": "a = 2", "new": "a = 9"}, {"old": "int", "new": "long"}],
        )
    )
    assert "occurs 2 times" in obs
    text = env.unwrapped.workspace.root.joinpath("kernels/a.cpp").read_text()
    assert text == "int a = 2;\nint b = 3;\n"  # all or nothing
    obs, *_ = env.step(call("list_files"))
    assert "kernels/a.cpp" in obs and "model.py" in obs and "read-only" in obs


def test_huge_file_reads_are_truncated(env):
    env.step(call("write_file", path="kernels/big.h", content="// filler line\n" * 30000))
    obs, *_ = env.step(call("read_file", path="kernels/big.h"))
    assert len(obs) <= env.unwrapped.config.max_observation_chars
    assert "not shown: the output limit is" in obs


def test_xml_form_and_several_calls_in_one_action(env):
    action = (
        "Let me look around.\n<tool_call>\n<function=read_skill>\n<parameter=name>\nworkspace\n"
        "</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
        + json.dumps(call("list_files"))
        + "\n</tool_call>"
    )
    obs, *_, info = env.step(action)
    assert [c["name"] for c in info["tool_calls"]] == ["read_skill", "list_files"]
    assert "[read_skill]" in obs and "[list_files]" in obs
    assert info["invalid_action"] is False


def test_openai_tool_calls_are_accepted(env):
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_skill", "arguments": "{}"},
            }
        ],
    }
    obs, *_, info = env.step(message)
    assert "workspace" in obs
    assert info["messages"][0]["tool_call_id"] == "call_1"


def test_tampered_reference_is_restored_before_judging(env):
    ref = env.unwrapped.workspace.root / "model.py"
    ref.chmod(0o644)
    ref.write_text("cheat")
    obs, *_, info = env.step(call("run"))
    assert "restored read-only file(s)" in obs and info["tool_results"][0]["restored_files"] == [
        "model.py"
    ]
    assert ref.read_text() != "cheat"


def test_misuse_raises_clear_errors():
    with pytest.raises(ConfigError, match="Did you mean 'max_turns'"):
        gym.make("CudaKernel-v0", device="cpu", max_turn=3)
    with pytest.raises(ConfigError, match="judge.device is 'cuda' but the env runs on 'cpu'"):
        gym.make("CudaKernel-v0", device="cpu", judge=JudgeConfig(device="cuda"))
    with pytest.raises(ConfigError, match="set it in one place"):
        gym.make(
            "CudaKernel-v0",
            device="cpu",
            tolerance_mode="paper",
            judge=JudgeConfig(device="cpu", tolerance_mode="strict"),
        )
    with pytest.raises(ConfigError, match="the judge given runs on 'cuda'"):
        gym.make("CudaKernel-v0", device="cpu", judge=ScriptedJudge("cuda"))
    with pytest.raises(ConfigError, match="judge must be a JudgeConfig or a judge object"):
        gym.make("CudaKernel-v0", device="cpu", judge="fast")
    env = make_env()
    with pytest.raises(EnvStateError, match=r"^Call reset\(\) before step\(\)\.$"):
        env.unwrapped.step(call("list_files"))
    env.close()
    env.close()


def test_async_episodes_run_concurrently():
    async def episode(seed):
        env = make_env()
        await env.unwrapped.areset(seed=seed, options={"task_id": "row_softmax"})
        obs, *_ = await env.unwrapped.astep(call("read_file", path="model.py"))
        env.close()
        return obs

    async def main():
        return await asyncio.gather(*(episode(s) for s in range(4)))

    results = asyncio.run(main())
    assert all("class Model" in r for r in results)


def test_close_removes_the_workspace():
    env = make_env()
    env.reset(seed=0)
    root = env.unwrapped.workspace.root
    env.close()
    assert not root.exists()
