"""The evaluator pool under a real local Ray with fake GPUs, placed as OpenRLHF places its engines.

OpenRLHF creates each vLLM engine actor inside the training placement group with
`placement_group_capture_child_tasks=True`. An env actor made from inside an engine must be
scheduled outside that group (on the evaluator GPU), and an actor that cannot start must end
its episode with the penalty and an infrastructure error after the start timeout, never hang.
"""

import asyncio
import json
import time
from pathlib import Path

import pytest

from agent_trainer.config import AgentConfig, RunnerConfig
from agent_trainer.envs import EvaluatorError, RayEnv
from agent_trainer.play import play_label
from agent_trainer.tiny import build_tiny_tokenizer
from tests.agent_trainer.fakes import ScriptedModel

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # starts a Ray node: ~20 s
from ray.exceptions import GetTimeoutError  # noqa: E402
from ray.util.placement_group import placement_group, remove_placement_group  # noqa: E402
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: E402

ENV_ID = "tests.agent_trainer.fakes:AgentTrainerScripted-v0"
ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="module")
def training_group():
    """A 3-CPU, 2-GPU (fake) Ray node; one CPU and one GPU reserved by the training group."""
    ray.init(num_cpus=3, num_gpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": ROOT}})
    group = placement_group([{"CPU": 1, "GPU": 1}])
    ray.get(group.ready(), timeout=60)
    yield group
    remove_placement_group(group)
    ray.shutdown()


def wait_until_dead(handle, timeout_s=60.0):
    """Return once calls to the killed actor fail."""
    from ray.exceptions import RayActorError

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(handle.__ray_ready__.remote(), timeout=timeout_s)
        except RayActorError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the killed actor still answers after {timeout_s:g} s")


@ray.remote
class Engine:
    """Stands where OpenRLHF's vLLM engine actor stands: in the group, capturing children."""

    def episode(self, start_timeout_s):
        env = RayEnv(ENV_ID, {"final_reward": 3.0}, num_gpus=0.25,
                     start_timeout_s=start_timeout_s)
        try:
            obs, info = env.reset(seed=1, options={"task_id": "toy"})
            _, reward, terminated, _, _ = env.step("submit")
            return obs, info["task_id"], reward, terminated
        finally:
            env.close()

    def default_placement_starts(self, timeout_s):
        """Whether an actor made the default way (captured into the group) starts in time."""
        probe = ray.remote(num_cpus=1, num_gpus=0.25)(Probe).remote()
        try:
            return ray.get(probe.ping.remote(), timeout=timeout_s)
        except GetTimeoutError:
            return False
        finally:
            ray.kill(probe)


class Probe:
    def ping(self):
        return True


def engine_in(group):
    strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0,
                                                placement_group_capture_child_tasks=True)
    return Engine.options(num_cpus=1, num_gpus=0.5, scheduling_strategy=strategy).remote()


def test_env_actors_start_outside_the_training_group(training_group):
    engine = engine_in(training_group)
    # The failure this guards against: a captured child needs the group's CPU, held already.
    assert ray.get(engine.default_placement_starts.remote(3.0), timeout=60) is False
    obs, task_id, reward, terminated = ray.get(engine.episode.remote(60.0), timeout=120)
    assert (obs, task_id, reward, terminated) == ("Task: make it fast.", "toy", 3.0, True)
    ray.kill(engine)


def test_an_env_actor_that_cannot_start_ends_the_episode_with_the_penalty(training_group):
    blocker = ray.remote(num_gpus=1, num_cpus=0)(Probe).remote()  # takes the evaluator GPU
    ray.get(blocker.ping.remote(), timeout=60)
    config = AgentConfig(env_id=ENV_ID, evaluator="ray", evaluator_gpus_per_env=0.5,
                         evaluator_start_timeout_s=1.0, runner=RunnerConfig(max_turns=2))
    tok = build_tiny_tokenizer()
    model = ScriptedModel(tok, ["submit"])
    label = json.dumps({"task_id": "toy", "seed": 0})
    episode = asyncio.run(play_label(config, label, model, tok))
    assert episode.error.startswith("reset: EvaluatorError: env actor did not start within 1 s")
    assert episode.reward == -1.0 and episode.logs["infra_error"] == 1.0
    assert model.calls == []  # no turn was played
    ray.kill(blocker)
    env = RayEnv(ENV_ID, {}, num_gpus=0.25, start_timeout_s=60.0)
    env.reset(seed=0)
    ray.kill(env.handle)
    wait_until_dead(env.handle)  # ray.kill is asynchronous: a step sent at once may still run
    with pytest.raises(EvaluatorError, match="env actor died during step"):
        env.step("submit")
    env.close()
