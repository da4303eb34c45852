"""ThreadVectorEnv via gym.make_vec: text batches, autoreset modes, stacked infos, a real submit."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import cuda_gym  # noqa: F401  (registers CudaKernel-v0)
from cuda_gym.demo import CPU_KERNEL, MODEL_NEW
from cuda_gym.errors import EnvStateError
from cuda_gym.vector import ThreadVectorEnv, stack_infos
from tests.conftest import TEST_JUDGE
from tests.fakes import ScriptedJudge
from tests.solutions import TASK_ID

LIST = {"name": "list_files", "arguments": {}}


def make_vec(num_envs=3, **kwargs):
    kwargs.setdefault("judge", TEST_JUDGE)
    kwargs.setdefault("task", TASK_ID)
    return gym.make_vec(
        "CudaKernel-v0",
        num_envs=num_envs,
        vectorization_mode="vector_entry_point",
        device="cpu",
        **kwargs,
    )


def test_make_vec_gives_a_thread_vector_env_of_text():
    envs = make_vec(3)
    assert isinstance(envs.unwrapped, ThreadVectorEnv)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    obs, infos = envs.reset(seed=0)
    assert isinstance(obs, tuple) and len(obs) == 3 and all(isinstance(o, str) for o in obs)
    assert obs in envs.observation_space
    assert list(infos["task_id"]) == [TASK_ID] * 3 and infos["_task_id"].all()
    actions = envs.action_space.sample()
    obs, rewards, terminated, truncated, infos = envs.step(actions)
    assert rewards.dtype == np.float64 and rewards.shape == (3,)
    assert terminated.dtype == np.bool_ and not terminated.any() and not truncated.any()
    assert infos["turn"].dtype == np.int64 and list(infos["turn"]) == [1, 1, 1]
    assert isinstance(infos["timings"], dict)
    envs.close()
    assert all(env.workspace is None for env in envs.unwrapped.envs)


def test_next_step_autoreset_resets_on_the_following_step():
    envs = make_vec(2, max_turns=1, judge_on_truncation=False)
    envs.reset(seed=1)
    obs, rewards, terminated, truncated, infos = envs.step([LIST, LIST])
    assert truncated.all() and list(infos["stop_reason"]) == ["max_turns"] * 2
    obs, rewards, terminated, truncated, infos = envs.step([LIST, LIST])
    assert all(o.startswith("# Task") for o in obs) and not truncated.any()
    assert "task_hash" in infos and not (rewards != 0).any()
    obs, *_ = envs.step([LIST, LIST])
    assert all("model.py" in o for o in obs)
    envs.close()


def test_same_step_autoreset_reports_final_obs_and_info():
    envs = make_vec(2, max_turns=1, judge_on_truncation=False, autoreset_mode="SameStep")
    envs.reset(seed=2)
    obs, rewards, terminated, truncated, infos = envs.step([LIST, LIST])
    assert truncated.all() and all(o.startswith("# Task") for o in obs)
    assert "model.py" in infos["final_obs"][0]
    assert list(infos["final_info"]["stop_reason"]) == ["max_turns"] * 2
    envs.close()


def test_disabled_autoreset_needs_a_reset_mask():
    envs = ThreadVectorEnv(
        2,
        autoreset_mode=AutoresetMode.DISABLED,
        device="cpu",
        task=TASK_ID,
        max_turns=1,
        judge_on_truncation=False,
    )
    envs.reset(seed=3)
    envs.step([LIST, LIST])
    with pytest.raises(EnvStateError, match="reset_mask"):
        envs.step([LIST, LIST])
    obs, infos = envs.reset(options={"reset_mask": np.array([True, False])})
    assert obs[0].startswith("# Task") and "model.py" in obs[1]
    assert list(infos["_task_id"]) == [True, False]
    envs.close()


def test_misuse_raises_clear_errors():
    envs = make_vec(2)
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="sequence of 2 actions"):
        envs.step([LIST])
    with pytest.raises(ValueError, match="one seed per sub-env"):
        envs.reset(seed=[1, 2, 3])
    envs.close()
    with pytest.raises(ValueError, match="positive integer"):
        ThreadVectorEnv(0, device="cpu")


def test_stack_infos_handles_missing_keys_none_and_nested_dicts():
    stacked = stack_infos([{"a": 1, "best": None}, None, {"a": 2.5, "best": {"r": 1}}], 3)
    assert stacked["a"].dtype == np.float64 and list(stacked["_a"]) == [True, False, True]
    assert stacked["best"][0] is None and stacked["best"][2] == {"r": 1}
    nested = stack_infos([{"v": {"ok": True}}, {"v": {"ok": False}}], 2)
    assert nested["v"]["ok"].dtype == np.bool_ and list(nested["v"]["ok"]) == [True, False]


def test_a_submit_in_one_sub_env_while_the_others_read():
    envs = make_vec(3, judge=ScriptedJudge("cpu"))
    envs.reset(seed=0)
    write = [
        {"name": "write_file", "arguments": {"path": "kernels/gated.cpp", "content": CPU_KERNEL}},
        {"name": "write_file", "arguments": {"path": "model_new.py", "content": MODEL_NEW}},
    ]
    envs.step([write, LIST, LIST])
    submit = {"name": "submit", "arguments": {}}
    read = {"name": "read_file", "arguments": {"path": "model.py"}}
    obs, rewards, terminated, truncated, infos = envs.step([submit, read, read])
    assert list(terminated) == [True, False, False]
    assert rewards[0] >= 1 and bool(infos["reward_components"]["correct"][0])
    assert list(infos["_reward_components"]) == [True, False, False]
    assert "class Model" in obs[1] and "class Model" in obs[2]
    envs.close()
