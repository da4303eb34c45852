"""`cuda-gym play`: a model behind an OpenAI-compatible endpoint plays episodes; results on disk.

    cuda-gym play --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B \
        --tasks builtin --episodes 16 --out runs/qwen3

writes `trajectories/NNNN_<task>.jsonl` (one per episode, see trajectory.py), `summary.json`
(one row per episode plus totals) and `summary.md` (the same as a Markdown table).
"""

from __future__ import annotations

import json
import logging
import random
import re
from dataclasses import dataclass
from pathlib import Path

from cuda_gym.agents.episode import run_episode
from cuda_gym.agents.openai_chat import TOOL_MODES, ChatAgentConfig, OpenAIChatAgent
from cuda_gym.errors import ConfigError, CudaGymError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlayConfig:
    """What `cuda-gym play` runs.

    Attributes:
        base_url: The endpoint's API root, e.g. "http://localhost:8000/v1".
        model: The served model's name.
        api_key_env: Environment variable holding the API key (unset is fine locally).
        task: One task id (or a task file) played in every episode; or None.
        source: Where to find `task` when it is not a built-in id or a file (a task source).
        tasks: A task source (see cuda_gym.tasks.catalog.SOURCE_HELP) to draw episodes from,
            each task once in a seeded order before any repeats; or None.
        episodes: Episodes to play.
        out: Directory for the trajectories and the summary.
        device: "auto", "cuda" or "cpu".
        tool_mode: "native" (tool schemas and tool_calls) or "text".
        max_turns: Turns per episode.
        seed: Seed of the task order and of the first episode's reset (episode i: seed + i).
        max_retries: Further attempts of a failed request (see ChatAgentConfig).
        progress: Show a progress bar on stderr.
    """

    base_url: str
    model: str
    out: str
    api_key_env: str = "OPENAI_API_KEY"
    task: str | None = None
    source: str | None = None
    tasks: str | None = None
    episodes: int = 1
    device: str = "auto"
    tool_mode: str = "native"
    max_turns: int = 30
    seed: int = 0
    max_retries: int = 4
    progress: bool = True

    def __post_init__(self) -> None:
        if (self.task is None) == (self.tasks is None):
            raise ConfigError("give exactly one of task (one id) and tasks (a task source)")
        if self.source is not None and self.task is None:
            raise ConfigError("source names where --task is found; with tasks it is not used")
        if self.episodes < 1:
            raise ConfigError(f"episodes must be at least 1, got {self.episodes}")
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be at least 1, got {self.max_turns}")
        if self.tool_mode not in TOOL_MODES:
            raise ConfigError(f"tool_mode must be one of {TOOL_MODES}, got {self.tool_mode!r}")
        if self.device not in ("auto", "cuda", "cpu"):
            raise ConfigError(f"device must be 'auto', 'cuda' or 'cpu', got {self.device!r}")


def episode_tasks(config: PlayConfig) -> list:
    """The Task of each episode, in order."""
    from cuda_gym.tasks.catalog import find_task, open_sources

    if config.task is not None:
        return [find_task(config.task, config.source)] * config.episodes
    pool = [task for task_set in open_sources(config.tasks) for task in task_set]
    if not pool:
        raise ConfigError(f"task source {config.tasks!r} holds no tasks")
    random.Random(config.seed).shuffle(pool)
    return [pool[i % len(pool)] for i in range(config.episodes)]


def _row(index: int, task_id: str, result=None, error: str | None = None) -> dict:
    final = (result.final if result is not None else None) or {}
    return {
        "episode": index,
        "task_id": task_id,
        "reward": result.reward if result is not None else None,
        "correct": final.get("correct"),
        "speedup_vs_eager": final.get("speedup_vs_eager"),
        "speedup_vs_compile": final.get("speedup_vs_compile"),
        "turns": result.turns if result is not None else 0,
        "stop_reason": result.stop_reason if result is not None else "infrastructure_error",
        "total_tokens": (result.usage or {}).get("total_tokens", 0) if result is not None else 0,
        "wall_s": round(result.wall_s, 1) if result is not None else None,
        "error": error if error is not None else (result.error if result is not None else None),
    }


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[dict], totals: dict) -> str:
    """The episodes as a Markdown table, with a totals line."""
    columns = [
        "episode",
        "task_id",
        "reward",
        "correct",
        "speedup_vs_eager",
        "speedup_vs_compile",
        "turns",
        "stop_reason",
        "total_tokens",
        "wall_s",
    ]
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(_cell(r[c]) for c in columns) + " |" for r in rows),
        "",
        f"{totals['episodes']} episodes of {totals['model']}: mean reward "
        f"{_cell(totals['mean_reward'])}, {totals['correct']} correct, "
        f"{totals['errors']} errors, {totals['total_tokens']} tokens.",
    ]
    return "\n".join(lines)


def play(config: PlayConfig) -> dict:
    """Play `config.episodes` episodes; write trajectories and summaries under `config.out`.

    An agent failure (the endpoint unreachable after retries) ends only its episode
    (stop reason "agent_error"); an infrastructure error of the env (a lost judge worker)
    is recorded in its episode's row and the run goes on.

    Returns:
        The summary: "rows", "totals", "table" (Markdown), "episodes" and "errors".
    """
    import gymnasium as gym
    from tqdm import tqdm

    import cuda_gym  # noqa: F401 - registers CudaKernel-v0

    out = Path(config.out)
    (out / "trajectories").mkdir(parents=True, exist_ok=True)
    tasks = episode_tasks(config)
    agent = OpenAIChatAgent(
        ChatAgentConfig(
            model=config.model,
            base_url=config.base_url,
            api_key_env=config.api_key_env,
            tool_mode=config.tool_mode,
            max_retries=config.max_retries,
        )
    )
    env = gym.make(
        "CudaKernel-v0", device=config.device, task_source="builtin", max_turns=config.max_turns
    )
    rows: list[dict] = []
    bar = tqdm(total=len(tasks), desc="episodes", unit="ep", disable=not config.progress)
    try:
        for i, task in enumerate(tasks):
            name = re.sub(r"[^\w.-]+", "_", task.task_id)
            path = out / "trajectories" / f"{i:04d}_{name}.jsonl"
            try:
                result = run_episode(
                    env,
                    agent,
                    seed=config.seed + i,
                    options={"task_id": task},
                    trajectory_path=path,
                )
                rows.append(_row(i, task.task_id, result))
            except CudaGymError as exc:
                logger.warning("episode %d (%s) failed: %s", i, task.task_id, exc)
                rows.append(_row(i, task.task_id, error=f"{type(exc).__name__}: {exc}"))
            rewards = [r["reward"] for r in rows if r["reward"] is not None]
            bar.set_postfix(
                task=task.task_id[:24],
                reward=rows[-1]["reward"],
                mean=round(sum(rewards) / len(rewards), 3) if rewards else None,
            )
            bar.update(1)
    finally:
        bar.close()
        env.close()
    rewards = [r["reward"] for r in rows if r["reward"] is not None]
    totals = {
        "model": config.model,
        "base_url": config.base_url,
        "episodes": len(rows),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "correct": sum(1 for r in rows if r["correct"]),
        "errors": sum(1 for r in rows if r["error"]),
        "total_tokens": sum(r["total_tokens"] for r in rows),
    }
    table = markdown_table(rows, totals)
    (out / "summary.json").write_text(json.dumps({"totals": totals, "rows": rows}, indent=2))
    (out / "summary.md").write_text(table + "\n")
    return {
        "rows": rows,
        "totals": totals,
        "table": table,
        "episodes": len(rows),
        "errors": totals["errors"],
    }
