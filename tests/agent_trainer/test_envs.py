"""Where envs live: in process, in an evaluator-pool host, or a FailedEnv when making fails."""

import gymnasium as gym
import pytest

from agent_trainer.config import AgentConfig
from agent_trainer.envs import EnvHost, FailedEnv, make_env

ENV_ID = "AgentTrainerScriptedHost-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point="tests.agent_trainer.fakes:ScriptedEnv",
                 disable_env_checker=True)


def test_env_host_forwards_the_gym_api():
    host = EnvHost(ENV_ID, {"final_reward": 2.0})
    obs, info = host.reset(seed=1, options={"task_id": "toy"})
    assert obs.startswith("Task") and info["task_id"] == "toy"
    assert host.step("submit")[1:3] == (2.0, True)
    host.close()


def test_make_env_turns_errors_into_a_failed_env():
    env = make_env(AgentConfig(env_id=ENV_ID, env_kwargs={"bogus": 1}))
    assert isinstance(env, FailedEnv)
    with pytest.raises(RuntimeError, match="gym.make failed: TypeError"):
        env.reset(seed=0)
    env.close()
    assert not isinstance(make_env(AgentConfig(env_id=ENV_ID)), FailedEnv)


def test_config_validation_names_the_fix():
    with pytest.raises(ValueError, match="env_error_penalty must lie inside reward_clip"):
        AgentConfig(reward_clip=(0, 3))
    with pytest.raises(ValueError, match="evaluator must be"):
        AgentConfig(evaluator="gpu")


def test_cuda_gym_env_kwargs_are_checked_when_the_config_is_read():
    with pytest.raises(ValueError, match=r"Unknown option agent.env_kwargs.devcie \(not a "
                                         r"cuda_gym EnvConfig field\). Did you mean 'device'\?"):
        AgentConfig(env_kwargs={"devcie": "cuda"})
    with pytest.raises(ValueError, match=r"Unknown option agent.env_kwargs.judge.tolerance_mod\. "
                                         r"Did you mean 'tolerance_mode'\?"):
        AgentConfig(env_kwargs={"judge": {"tolerance_mod": "paper"}})
    with pytest.raises(ValueError, match=r"agent.env_kwargs: device must be"):
        AgentConfig(env_id="cuda_gym:CudaKernelSingleTurn-v0", env_kwargs={"device": "gpu"})
    AgentConfig(env_id=ENV_ID, env_kwargs={"anything": 1})  # other envs: gym.make decides


def test_a_judge_block_reaches_the_env_as_a_judge_config():
    config = AgentConfig(env_kwargs={"device": "cpu", "judge": {"tolerance_mode": "paper"}})
    env = make_env(config)
    try:
        assert not isinstance(env, FailedEnv), getattr(env, "error", None)
        assert env.unwrapped.judge.config.tolerance_mode == "paper"
    finally:
        env.close()
