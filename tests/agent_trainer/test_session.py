"""EnvSession: the env side of an episode, shared by the runner and the TRL environment."""

from agent_trainer.config import RunnerConfig
from agent_trainer.session import RESET_FAILED, SUBMIT_ACTION, EnvSession
from tests.agent_trainer.fakes import ScriptedEnv


def test_steps_rewards_and_how_the_episode_ended():
    env = ScriptedEnv(final_reward=2.0)
    session = EnvSession(env, RunnerConfig())
    obs, system = session.reset(seed=1, options={"task_id": "toy"})
    assert obs == "Task: make it fast." and "submit" in system and session.task_id == "toy"
    assert session.step("run").observation == "obs 1: ok" and not session.ended
    result = session.step("submit")
    assert result.terminated and session.ended and session.stop_reason == "submit"
    assert session.rewards == [0.0, 2.0] and session.reward == 2.0 and session.steps == 2
    session.submit_on_budget()  # the episode already ended: nothing more is sent
    assert env.actions == ["run", "submit"]


def test_budget_submit_judges_the_workspace_unless_disabled():
    env = ScriptedEnv(final_reward=3.0)
    session = EnvSession(env, RunnerConfig())
    session.reset()
    session.step("run")
    session.submit_on_budget()
    assert env.actions == ["run", SUBMIT_ACTION] and session.reward == 3.0
    assert not session.terminated and session.ended and session.steps == 1
    session.submit_on_budget()  # once only
    assert env.actions == ["run", SUBMIT_ACTION]
    env = ScriptedEnv()
    session = EnvSession(env, RunnerConfig(judge_on_budget=False))
    session.reset()
    session.submit_on_budget()
    assert env.actions == [] and session.reward == 0.0 and session.ended


def test_env_exceptions_become_the_error_and_the_penalty():
    session = EnvSession(ScriptedEnv(fail_on=("reset", 0)), RunnerConfig(env_error_penalty=-2))
    obs, _ = session.reset()
    assert obs == RESET_FAILED and session.ended and session.reward == -2.0
    assert session.error.startswith("reset: RuntimeError: reset exploded")
    session = EnvSession(ScriptedEnv(fail_on=("step", 1)), RunnerConfig())
    session.reset()
    result = session.step("run")
    assert result.observation == "" and session.error.startswith("step: RuntimeError")
    assert session.reward == -1.0 and session.steps == 0
