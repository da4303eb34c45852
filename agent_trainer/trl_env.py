"""TRL integration: the environment of GRPOTrainer's `environment_factory`, playing CudaKernel-v0.

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    trainer = GRPOTrainer(model, args=GRPOConfig(...),
                          train_dataset=Dataset.from_list(trl_rows(dataset_rows(...), config)),
                          environment_factory=environment_factory(config))

TRL generates, parses tool calls with the model's chat template and masks tool results itself.
Each public method of CudaGymToolEnv is one cuda_gym tool, and each call is one env step through
the EnvSession the token-level runner uses, so rewards, the env-error penalty and the budgets are
the runner's: `reset(**row)` starts the task the row's `label` names and returns the task
statement (TRL appends it to the prompt); after `runner.max_turns` calls, or when TRL stops
(no more tool calls, its iteration or length cap), `get_reward()` judges the workspace as it
stands (`judge_on_budget`) and returns the reward clipped to `reward_clip`.
"""

from __future__ import annotations

import functools
import importlib.util
import weakref
from collections.abc import Callable
from typing import Any

from agent_trainer.config import AgentConfig
from agent_trainer.dataset import parse_label
from agent_trainer.envs import FailedEnv, make_env
from agent_trainer.play import LabelErrorEnv, clipped_reward, close_env
from agent_trainer.session import EnvSession

EPISODE_OVER = "The episode is over; no more tools can be called."
"""The answer to a tool call after the episode ended."""


class CudaGymToolEnv:
    """One rollout's environment for TRL: cuda_gym's tools as methods, `reset`, `get_reward`.

    TRL turns every public method into a tool, so helpers here are private. Instances are
    pooled and reset between rollouts; the Gym env is made at the first reset and reused.

    Args:
        config: The run's agent configuration (env id and kwargs, runner budgets, reward clip).
    """

    def __init__(self, config: AgentConfig | None = None) -> None:
        self._config = config or AgentConfig()
        self._env: Any = None
        self._session: EnvSession | None = None

    @property
    def session(self) -> EnvSession | None:
        """The current episode's env side (rewards, error, stop reason), None before reset."""
        return self._session

    def reset(self, **row: Any) -> str:
        """Start the task the dataset row's `label` names; return the task statement."""
        try:
            options, seed = parse_label(row.get("label"))
            env = self._gym_env()
        except (ValueError, TypeError) as exc:  # a bad label: the episode gets the penalty
            options, seed, env = None, None, LabelErrorEnv(exc)
        self._session = EnvSession(env, self._config.runner)
        observation, _system = self._session.reset(seed, options)
        return observation

    def get_reward(self) -> float:
        """End the episode (judging the workspace if the agent did not submit); its reward."""
        session = self._require_session()
        session.submit_on_budget()
        return clipped_reward(session.reward, self._config)

    def list_files(self) -> str:
        """List the workspace files with their sizes; read-only files are marked."""
        return self._call("list_files")

    def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> str:
        """Read a workspace file with line numbers; optionally only lines start_line..end_line.

        Args:
            path: Path relative to the workspace root.
            start_line: First line (1-based).
            end_line: Last line (inclusive).
        """
        return self._call("read_file", path=path, start_line=start_line, end_line=end_line)

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite model_new.py or a file under kernels/ with the given content.

        Args:
            path: Path relative to the workspace root.
            content: The complete new file content.
        """
        return self._call("write_file", path=path, content=content)

    def edit_file(
        self,
        path: str,
        edits: list[dict] | None = None,
        old: str | None = None,
        new: str | None = None,
    ) -> str:
        """Replace exact text in model_new.py or a kernels/ file, all edits or none.

        Args:
            path: Path relative to the workspace root.
            edits: Replacements to apply in order, each {"old": exact text occurring once,
                "new": replacement text}.
            old: Single-edit form: text to replace.
            new: Single-edit form: replacement.
        """
        return self._call("edit_file", path=path, edits=edits, old=old, new=new)

    def compile(self) -> str:
        """Build every .cu/.cpp file in kernels/ into the extension `kernels_ext`."""
        return self._call("compile")

    def run(self) -> str:
        """Build if needed, run ModelNew on fresh inputs and compare it with the reference."""
        return self._call("run")

    def profile(self) -> str:
        """Check correctness, then time ModelNew against eager PyTorch and torch.compile."""
        return self._call("profile")

    def read_skill(self, name: str | None = None) -> str:
        """Read a skill document; without a name, list the skills.

        Args:
            name: Skill name.
        """
        return self._call("read_skill", name=name)

    def submit(self) -> str:
        """Submit model_new.py and kernels/ for the final judgement; ends the episode."""
        return self._call("submit")

    def _call(self, name: str, **arguments: Any) -> str:
        session = self._require_session()
        if session.ended:
            return EPISODE_OVER
        call = {"name": name, "arguments": {k: v for k, v in arguments.items() if v is not None}}
        observation = session.step(call).observation
        if session.error is not None:
            return f"The environment failed ({session.error}). {EPISODE_OVER}"
        if not session.ended and session.steps >= self._config.runner.max_turns:
            session.submit_on_budget()
            observation += (
                "\n\nThe turn budget is spent: the workspace was submitted for judgement. "
                + EPISODE_OVER
            )
        return observation

    def _require_session(self) -> EnvSession:
        if self._session is None:
            raise RuntimeError("Call reset() before calling tools or get_reward().")
        return self._session

    def _gym_env(self) -> Any:
        """The Gym env, made at the first reset (again if making it failed) and reused."""
        if self._env is None or isinstance(self._env, FailedEnv):
            self._env = make_env(self._config)
            weakref.finalize(self, close_env, self._env)
        return self._env


def environment_factory(config: AgentConfig | None = None) -> Callable[[], CudaGymToolEnv]:
    """The `environment_factory` for TRL's GRPOTrainer: a fresh CudaGymToolEnv per call.

    Raises:
        ImportError: TRL is not installed.
    """
    if importlib.util.find_spec("trl") is None:
        raise ImportError(
            "environment_factory is for TRL's GRPOTrainer, and trl is not installed: "
            "pip install trl==1.16.0"
        )
    return functools.partial(CudaGymToolEnv, config or AgentConfig())


def trl_rows(rows: list[dict], config: AgentConfig | None = None) -> list[dict]:
    """GRPOTrainer dataset rows from `dataset_rows` rows: system prompt, empty user, label.

    TRL appends the task statement from `reset` to the (empty) user message; the tools are
    rendered by the chat template from CudaGymToolEnv's methods.
    """
    system = (config or AgentConfig()).runner.system_prompt
    prompt = [{"role": "system", "content": system}, {"role": "user", "content": ""}]
    return [{"prompt": list(prompt), "label": row["label"]} for row in rows]
