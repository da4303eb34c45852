"""Rejection fine-tuning data: keep good trajectories, write them as token rows for SFT.

Kept: reward above `min_reward`, no environment error, no malformed tool call (when
`drop_invalid`), no action repeated more than `max_repeats` times (looping), and not truncated
when `drop_truncated`. Each kept trajectory becomes one JSONL row `{"input_ids",
"action_ranges"}`: the tokens the policy saw and sampled, cut to the SFT length, never
re-rendered through a chat template (token_sft.py); the loss falls on the action spans only.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from agent_trainer.layout import max_len_for, stage_dir, trajectories_path
from agent_trainer.pipeline_config import PipelineConfig, RFTConfig
from agent_trainer.token_sft import token_row


@dataclass
class RFTReport:
    """Counts of one RFT build."""

    read: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    out: str = ""

    def summary(self) -> dict:
        """JSON-ready counts."""
        return {"read": self.read, "kept": self.kept, "dropped": dict(self.dropped),
                "out": self.out}


def drop_reason(traj: dict, rft: RFTConfig) -> str | None:
    """Why a trajectory is rejected, or None when it is kept."""
    if traj.get("error"):
        return "env_error"
    if float(traj.get("reward", 0.0)) <= rft.min_reward:
        return "low_reward"
    turns = traj.get("turns") or []
    if not any(m.get("role") == "assistant" for m in traj.get("messages", [])):
        return "no_action"
    if rft.drop_invalid and any(t.get("invalid_action") or t.get("parse_errors")
                                for t in turns):
        return "malformed_tool_call"
    actions = Counter(" ".join(t.get("action", "").split()) for t in turns)
    if actions and max(actions.values()) > rft.max_repeats:
        return "looping"
    if rft.drop_truncated and traj.get("truncated"):
        return "truncated"
    return None


def write_sft_set(trajectory_files: list[Path], out: Path, rft: RFTConfig,
                  max_len: int) -> RFTReport:
    """Filter the JSONL trajectories in `trajectory_files` and write the SFT set to `out`.

    Args:
        trajectory_files: JSONL files of episodes (`Episode.to_json()` lines).
        out: The SFT set (JSONL token rows).
        rft: The filter.
        max_len: Longest row in tokens; longer episodes are cut (their later actions dropped).

    Raises:
        ValueError: A line is not a trajectory with token ids (the file and line are named).
    """
    report = RFTReport(out=str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    dropped: Counter = Counter()
    with out.open("w") as sink:
        for path in trajectory_files:
            for n, line in enumerate(Path(path).read_text().splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    traj = json.loads(line)
                    if not isinstance(traj, dict) or not {"messages", "token_ids",
                                                          "action_ranges"} <= set(traj):
                        raise ValueError("not a trajectory object with 'messages', "
                                         "'token_ids' and 'action_ranges'")
                except ValueError as exc:
                    raise ValueError(f"{path}:{n}: {exc}") from exc
                report.read += 1
                reason = drop_reason(traj, rft)
                if reason:
                    dropped[reason] += 1
                    continue
                row = token_row(traj, max_len)
                if row is None:
                    dropped["no_action_within_max_len"] += 1
                    continue
                sink.write(json.dumps(row) + "\n")
                report.kept += 1
    report.dropped = dict(sorted(dropped.items()))
    return report


def build_sft_set(cfg: PipelineConfig) -> RFTReport:
    """The rft stage's data step: collect's trajectories -> <run_dir>/rft/sft.jsonl."""
    source = trajectories_path(cfg)
    if not source.is_file():
        raise FileNotFoundError(f"no trajectories at {source}; run the collect stage first")
    out = stage_dir(cfg, "rft") / "sft.jsonl"
    report = write_sft_set([source], out, cfg.rft, max_len_for(cfg, "rft"))
    (out.parent / "rft_report.json").write_text(json.dumps(report.summary(), indent=2))
    if report.kept == 0:
        raise ValueError(f"no trajectory of {report.read} passed the RFT filter "
                         f"({report.dropped}); collect more or relax rft.min_reward")
    return report
