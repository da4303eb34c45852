"""Configuration of an episode (RunnerConfig) and of the agent a run binds (AgentConfig)."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from typing import Any

DEFAULT_SYSTEM_PROMPT = """\
You are an expert performance engineer. You work in a sandbox to replace a PyTorch reference
model with your own faster kernels. Work step by step: read the skill documents and the
reference, write kernels and model_new.py, compile, check correctness with run, measure with
profile, improve, and call submit when you are done. Every reply must contain at least one tool
call."""


@dataclass(frozen=True)
class RunnerConfig:
    """How one episode is played: budgets, stop strings, prompt text, error handling.

    Attributes:
        max_turns: Model turns per episode before the runner ends it (the env may end it first).
        max_length: Token budget of the whole sequence: prompt, actions and feedback.
        max_response_length: Token budget of what follows the first prompt (actions and
            feedback), for trainers that size the two parts apart (verl's response_length);
            None: only `max_length` applies.
        max_tokens_per_turn: Most tokens the model may generate in one turn.
        stop: Extra stop strings for generation (the end-of-turn token always stops it).
        system_prompt: System text; the env's tool schemas are appended to it.
        feedback_role: Chat role of environment feedback: "user" or "tool".
        env_error_penalty: Reward of an episode whose environment raised an exception.
        judge_on_budget: When the runner's turn or token budget ends the episode, submit the
            workspace as it stands (so it is judged, as the env does on its own truncation).
    """

    max_turns: int = 40
    max_length: int = 32768
    max_response_length: int | None = None
    max_tokens_per_turn: int = 8192
    stop: tuple[str, ...] = ()
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    feedback_role: str = "user"
    env_error_penalty: float = -1.0
    judge_on_budget: bool = True

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if self.max_tokens_per_turn < 1:
            raise ValueError("max_tokens_per_turn must be at least 1")
        if self.max_response_length is not None and self.max_response_length < 1:
            raise ValueError("max_response_length must be at least 1, or None for no limit")
        if self.max_length <= self.max_tokens_per_turn // 64:
            raise ValueError("max_length is too small; give the whole sequence more tokens")
        if self.feedback_role not in ("user", "tool"):
            raise ValueError("feedback_role must be 'user' or 'tool'")
        if isinstance(self.stop, str):
            raise ValueError("stop must be a list of strings, not one string")
        object.__setattr__(self, "stop", tuple(self.stop))


@dataclass(frozen=True)
class AgentConfig:
    """What the OpenRLHF AgentExecutor of one run does; written to the run's agent_config.json.

    Attributes:
        env_id: Gymnasium id of the environment, e.g. "cuda_gym:CudaKernel-v0".
        env_kwargs: Keyword arguments for `gymnasium.make` (EnvConfig fields of cuda_gym).
        runner: How each episode is played.
        max_concurrent_episodes: Episodes running at once on one vLLM engine (one executor).
        reward_clip: Range the terminal reward is clipped to; keep it equal to OpenRLHF's
            `--reward.clip_range`.
        success_reward: `scores` is 1 when the final reward reaches this, else 0 (2 = correct
            and faster than eager with the milestone reward).
        evaluator: "local" (envs run in the vLLM actor's process and GPU) or "ray" (each env
            runs in a Ray actor holding `evaluator_gpus_per_env` of a GPU outside the training
            placement group: the separate evaluator pool).
        evaluator_gpus_per_env: GPU share of one env actor when `evaluator` is "ray".
        evaluator_cpus_per_env: CPU share of one env actor (its compilations run there).
        evaluator_start_timeout_s: Seconds an env actor may take to start and answer its first
            reset; past it the episode ends with the penalty and an infrastructure error.
        evaluator_step_timeout_s: Seconds any later env call may take (a step may judge).
        trajectory_dir: When set, every episode is appended as JSON to
            `episodes-<pid>.jsonl` there (for inspection and later RFT).
    """

    env_id: str = "cuda_gym:CudaKernel-v0"
    env_kwargs: dict = field(default_factory=dict)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    max_concurrent_episodes: int = 8
    reward_clip: tuple[float, float] = (-10.0, 10.0)
    success_reward: float = 2.0
    evaluator: str = "local"
    evaluator_gpus_per_env: float = 0.25
    evaluator_cpus_per_env: float = 1.0
    evaluator_start_timeout_s: float = 600.0
    evaluator_step_timeout_s: float = 1800.0
    trajectory_dir: str | None = None

    def __post_init__(self) -> None:
        if self.max_concurrent_episodes < 1:
            raise ValueError("max_concurrent_episodes must be at least 1")
        clip = tuple(float(x) for x in self.reward_clip)
        if len(clip) != 2 or clip[0] >= clip[1]:
            raise ValueError("reward_clip must be [low, high] with low < high")
        object.__setattr__(self, "reward_clip", clip)
        if not clip[0] <= self.runner.env_error_penalty <= clip[1]:
            raise ValueError("runner.env_error_penalty must lie inside reward_clip")
        if self.evaluator not in ("local", "ray"):
            raise ValueError("evaluator must be 'local' or 'ray'")
        if not 0 < self.evaluator_gpus_per_env <= 1:
            raise ValueError("evaluator_gpus_per_env must be in (0, 1]")
        if self.evaluator_cpus_per_env < 0:
            raise ValueError("evaluator_cpus_per_env must not be negative")
        if min(self.evaluator_start_timeout_s, self.evaluator_step_timeout_s) <= 0:
            raise ValueError("evaluator timeouts must be positive seconds")
        if not isinstance(self.env_kwargs, dict):
            raise ValueError("env_kwargs must be a mapping of gym.make keyword arguments")
        make_kwargs(self.env_id, self.env_kwargs)  # raises on a misspelt or invalid option


CUDA_GYM_ENV_IDS = ("CudaKernel-v0", "CudaKernelSingleTurn-v0")


def make_kwargs(env_id: str, env_kwargs: dict) -> dict:
    """`gymnasium.make` keyword arguments from a config's JSON-ready `env_kwargs`.

    For cuda_gym's envs every key must be an `EnvConfig` field and the values must pass its
    checks; a `judge:` mapping becomes a `cuda_gym.JudgeConfig` (its keys checked as that
    class's fields). Other env ids get `env_kwargs` unchanged.

    Raises:
        ValueError: An unknown or invalid option, named with its path (agent.env_kwargs...).
    """
    if env_id.removeprefix("cuda_gym:") not in CUDA_GYM_ENV_IDS:
        return dict(env_kwargs)
    from cuda_gym import EnvConfig, JudgeConfig

    kwargs = dict(env_kwargs)
    names = [f.name for f in dataclasses.fields(EnvConfig)]
    for key in kwargs:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"Unknown option agent.env_kwargs.{key} (not a cuda_gym EnvConfig "
                             f"field).{hint}")
    if isinstance(kwargs.get("judge"), dict):
        kwargs["judge"] = from_dict(JudgeConfig, kwargs["judge"], "agent.env_kwargs.judge")
    try:
        EnvConfig(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"agent.env_kwargs: {exc}") from exc
    return kwargs


def to_dict(obj: Any) -> Any:
    """A JSON-ready copy of a config dataclass (tuples become lists)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def from_dict(cls: type, data: Any, where: str = "") -> Any:
    """Build config dataclass `cls` from a mapping; unknown keys raise with a suggestion.

    Raises:
        ValueError: `data` is not a mapping, names an unknown field, or fails validation.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"{where or cls.__name__} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        key = str(key).replace("-", "_")
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"Unknown option {where + '.' if where else ''}{key}.{hint}")
        kwargs[key] = _convert(hints[key], value, f"{where + '.' if where else ''}{key}")
    return cls(**kwargs)


def _convert(hint: Any, value: Any, where: str) -> Any:
    if value is None:
        return None
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, where)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if arg is not type(None):
                return _convert(arg, value, where)
    if origin is tuple or hint is tuple:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ValueError(f"{where} must be a list")
        return tuple(value)
    return value
