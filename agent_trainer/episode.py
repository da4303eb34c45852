"""What an episode produces: generations, turns, and the Episode record with fixed-key logs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

LOG_KEYS = (
    "turns",
    "tool_calls",
    "invalid_actions",
    "env_error",
    "infra_error",
    "terminated",
    "budget_truncated",
    "hit_turn_cap",
    "hit_token_budget",
    "final_reward",
    "compiled",
    "correct",
    "speedup_vs_eager",
    "speedup_vs_compile",
    "action_tokens",
    "feedback_tokens",
    "total_tokens",
    "generation_s",
    "env_s",
)
"""Keys of `Episode.logs`, the same for every episode (OpenRLHF requires identical keys)."""

STOP_REASONS = (
    "submit",  # the agent submitted (env terminated)
    "max_turns",  # env truncations, named as cuda_gym names them
    "time_budget",
    "invalid_actions",
    "turn_cap",  # the runner's own budgets
    "token_budget",
    "env_error",  # the environment raised
)


@dataclass
class Generation:
    """One model turn as the inference engine returned it.

    Attributes:
        token_ids: Generated token ids, exactly as sampled (never re-tokenized).
        text: The generated text.
        logprobs: Log-probability of each generated token, or None when not requested.
        finish_reason: "stop" (end-of-turn token or stop string) or "length" (token cap).
    """

    token_ids: list[int]
    text: str
    logprobs: list[float] | None = None
    finish_reason: str = "stop"

    def __post_init__(self) -> None:
        self.token_ids = [int(t) for t in self.token_ids]
        if self.logprobs is not None:
            self.logprobs = [float(x) for x in self.logprobs]
            if len(self.logprobs) != len(self.token_ids):
                raise ValueError(
                    f"generate returned {len(self.logprobs)} logprobs for "
                    f"{len(self.token_ids)} tokens"
                )


@dataclass
class Turn:
    """One model action and the environment's answer."""

    action: str
    observation: str
    reward: float
    finish_reason: str
    action_tokens: int
    feedback_tokens: int
    tool_calls: list[str]
    invalid_action: bool
    parse_errors: list[str]
    generation_s: float
    env_s: float


@dataclass
class Episode:
    """Everything one episode produced, framework-neutral.

    Attributes:
        token_ids: Prompt, actions and feedback, in order.
        prompt_length: Tokens of the first prompt.
        action_ranges: [start, end) spans of model-generated tokens in `token_ids`.
        rollout_log_probs: One entry per token (0.0 outside actions), or None when any turn
            came without log-probs.
        messages: The conversation as chat messages (system, user, assistant, feedback, ...).
        turn_rewards: Environment reward of each step (the env's last step carries the judged
            reward; a submit forced by the runner's budget adds one more entry).
        reward: Final episode reward: the sum of `turn_rewards`, or the penalty on env errors.
        done: The agent ended the episode (submit).
        truncated: A budget ended it: env truncation, turn cap, token budget, or the last
            generation hit its token cap.
        stop_reason: One of STOP_REASONS.
        error: The environment error message, when there was one.
        task_id: The task played, when the env reported it.
        turns: Per-turn details.
        logs: Scalars under LOG_KEYS.
        info: The env's last `info` (verdict, reward components) when there is one.
    """

    token_ids: list[int]
    prompt_length: int
    action_ranges: list[tuple[int, int]]
    rollout_log_probs: list[float] | None
    messages: list[dict]
    turn_rewards: list[float]
    reward: float
    done: bool
    truncated: bool
    stop_reason: str
    error: str | None = None
    task_id: str | None = None
    turns: list[Turn] = field(default_factory=list)
    logs: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        """A JSON-ready dict (one JSONL trajectory line)."""
        data = asdict(self)
        data["action_ranges"] = [list(r) for r in self.action_ranges]
        data["info"] = _jsonable(self.info)
        return data


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)
