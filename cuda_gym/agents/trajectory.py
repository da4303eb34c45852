"""Trajectories as JSONL: one line for the reset, one per step, one for the end.

- reset: the task statement (`observation`), the reset info, and the agent's description.
- step: the assistant `message`, the `action` given to the env, its token `usage` and
  `latency_s`, the env's `observation` and `tool_messages`, `reward`, `terminated`,
  `truncated` and the step's results (`info`: tool calls and results, verdict, best, ...).
- end: the episode summary (reward, turns, tokens, stop reason, best state) and, for agents
  that keep one, the whole conversation (`messages`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cuda_gym.errors import CudaGymError

# Step-info keys kept in a trajectory line (the rest is bulky or repeated).
STEP_INFO_KEYS = (
    "turn",
    "elapsed_s",
    "tool_calls",
    "tool_results",
    "parse_errors",
    "invalid_action",
    "invalid_action_count",
    "timings",
    "stop_reason",
    "best",
    "reward_components",
    "verdict",
)


class TrajectoryError(CudaGymError, ValueError):
    """A trajectory file is missing or malformed."""


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


class TrajectoryWriter:
    """Appends trajectory records to a JSONL file, one flushed line each.

    Args:
        path: The `.jsonl` file; its parent directories are created; an existing file is
            replaced.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w")

    def write(self, record: dict) -> None:
        """Write one record (values that JSON cannot hold are written as their repr)."""
        self._file.write(json.dumps(_jsonable(record)) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file; safe to call twice."""
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def read_trajectory(path: str | Path) -> list[dict]:
    """Read a trajectory written by `TrajectoryWriter`.

    Raises:
        TrajectoryError: The file is missing, a line is not JSON, or the first record is not
            a reset.
    """
    path = Path(path)
    if not path.is_file():
        raise TrajectoryError(f"trajectory not found: {path}")
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError as exc:
            raise TrajectoryError(f"{path}:{number} is not JSON: {exc}") from exc
    if not records or records[0].get("type") != "reset":
        raise TrajectoryError(f"{path} does not start with a reset record")
    return records


def step_info_record(info: dict) -> dict:
    """The part of a step's info stored in the trajectory."""
    return {k: info[k] for k in STEP_INFO_KEYS if k in info}
