"""One problem, start to finish: judge a solution, play an agent episode, or the sanity run.

`run_problem` is what the executor runs; it writes the problem's record (a JSON-ready dict) to
disk, returns it, and never raises for a failing kernel or an infrastructure error of one
problem: those are records with status "error" (retried when the run is resumed).
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym

from benchmarks.kernelbench.config import HARNESS_VERSION, HarnessConfig
from benchmarks.kernelbench.problems import Problem
from benchmarks.kernelbench.records import OUT_OF_MEMORY, write_record
from benchmarks.kernelbench.solutions import find_solution, solution_files, write_solution_dir
from benchmarks.kernelbench.system import harness_commit
from cuda_gym.agents import (
    ChatAgentConfig,
    OpenAIChatAgent,
    ReplayAgent,
    ScriptedAgent,
    run_episode,
)
from cuda_gym.errors import CudaGymError, is_out_of_memory
from cuda_gym.judge import Judge, Verdict
from cuda_gym.tasks import Task

logger = logging.getLogger(__name__)

BUILD_LOG_CHARS = 2000


@dataclass(frozen=True)
class ProblemJob:
    """A problem and the run it belongs to (picklable, for worker processes).

    Attributes:
        alone: The job runs in the final pass, one problem per GPU; out of memory is then final.
    """

    problem: Problem
    config: HarnessConfig
    alone: bool = False


def run_problem(job: ProblemJob) -> dict:
    """The problem's record; see the module docstring."""
    problem, cfg = job.problem, job.config
    start = time.monotonic()
    record = {
        "problem": problem.key,
        "level": problem.level,
        "problem_id": problem.problem_id,
        "name": problem.name,
        "file_sha256": problem.file_sha256,
        "kind": cfg.kind,
        "status": "done",
        "harness_version": HARNESS_VERSION,
        "harness_commit": harness_commit(),
    }
    try:
        task = problem.task().for_device(cfg.device)
        record["task_hash"] = task.content_hash
        if cfg.kind == "reference":
            verdict = Judge(cfg.judge_config()).evaluate_reference_as_candidate(task)
            record.update(_scored(verdict))
        elif cfg.kind == "solutions":
            _judge_solution(problem, task, cfg, record)
        else:
            _play_agent(problem, task, cfg, record)
    except CudaGymError as exc:
        logger.warning("%s failed: %s", problem.key, exc)
        record.update(status="error", correct=False, error=f"{type(exc).__name__}: {exc}")
    # One worker per GPU (or one in all) is alone on its device already.
    alone = job.alone or cfg.workers <= max(1, len(cfg.gpus or ()))
    if cfg.kind != "agent" and _short_of_memory(record.get("error") or ""):
        # Other problems' processes hold device memory even while this one has the device's
        # gate to itself, so the judge's own rerun alone is not enough: the run judges the
        # problem again at its end, with nothing else on the GPU. An agent's out-of-memory
        # steps are feedback within its episode and are not rerun.
        if alone:
            record["flags"] = list(record.get("flags") or []) + ["out_of_memory_alone"]
        else:
            record["status"] = OUT_OF_MEMORY
    if job.alone:
        record["flags"] = list(record.get("flags") or []) + ["judged_alone"]
    record["wall_s"] = round(time.monotonic() - start, 3)
    write_record(cfg.out, problem, record)
    return record


# A judge process killed by SIGKILL that the judge did not kill (its own kills are reported as
# timeouts) was most likely taken by the kernel's out-of-memory killer while other problems'
# processes held the host's memory (KernelBench's largest level-1 inputs are 6 GiB each).
KILLED = "killed by SIGKILL"


def _short_of_memory(error: str) -> bool:
    """Whether a problem's error may come from sharing the machine: rerun it alone."""
    return is_out_of_memory(error) or KILLED in error


def _judge_solution(problem: Problem, task: Task, cfg: HarnessConfig, record: dict) -> None:
    solution = find_solution(cfg.solutions_dir, problem)
    if solution is None:
        record.update(status="missing", correct=False, error="no solution file")
        return
    files, notes = solution_files(solution)
    record["solution"] = {"path": str(solution), "adaptations": notes}
    with tempfile.TemporaryDirectory(prefix="kb_solution_") as tmp:
        sol_dir = write_solution_dir(files, Path(tmp) / "solution")
        verdict = Judge(cfg.judge_config()).evaluate(task, sol_dir, timing=True)
    record.update(_scored(verdict))


def _make_agent(problem: Problem, cfg: HarnessConfig, record: dict):
    if cfg.agent == "openai":
        return OpenAIChatAgent(
            ChatAgentConfig(
                model=cfg.model,
                base_url=cfg.base_url,
                api_key_env=cfg.api_key_env,
                tool_mode=cfg.tool_mode,
                temperature=cfg.temperature,
                max_tokens=cfg.max_tokens,
                timeout_s=cfg.request_timeout_s,
                max_retries=cfg.max_retries,
            )
        )
    if cfg.agent == "scripted":
        solution = find_solution(cfg.solutions_dir, problem)
        if solution is None:
            return None
        files, notes = solution_files(solution)
        record["solution"] = {"path": str(solution), "adaptations": notes}
        # Write the files and submit: one judgement per problem, as with --solutions-dir.
        return ScriptedAgent.for_files(files, label=problem.key, run=False)
    path = cfg.trajectories_dir / f"level{problem.level}" / f"{problem.name}.jsonl"
    return ReplayAgent(path) if path.is_file() else None


def _play_agent(problem: Problem, task: Task, cfg: HarnessConfig, record: dict) -> None:
    agent = _make_agent(problem, cfg, record)
    if agent is None:
        what = "solution" if cfg.agent == "scripted" else "trajectory"
        record.update(status="missing", correct=False, error=f"no {what} for this problem")
        return
    trajectory = cfg.out / "trajectories" / f"level{problem.level}" / f"{problem.name}.jsonl"
    env = gym.make(
        "cuda_gym:CudaKernel-v0",
        device=cfg.device,
        task=str(problem.path),
        max_turns=cfg.max_turns,
        time_budget_s=cfg.time_budget_s,
        judge=cfg.judge_config(),
    )
    try:
        episode = run_episode(env, agent, seed=cfg.seed, trajectory_path=trajectory)
    finally:
        env.close()
    final = _scored_dict(episode.final) if episode.final else None
    agent_info = {
        **episode.summary(),
        "trajectory": str(trajectory.relative_to(cfg.out)),
        "final": None if final is None else {k: final[k] for k in _OUTCOME_KEYS},
        "describe": agent.describe(),
    }
    record["agent"] = agent_info
    if episode.error:
        record.update(status="error", correct=False, error=f"AgentError: {episode.error}")
    scored, source = _best_of_trajectory(episode, final, task, cfg)
    agent_info["scored_from"] = source
    if scored is not None:
        record.update(scored)
    else:
        record.setdefault("correct", False)


_OUTCOME_KEYS = ("correct", "compiled", "speedup_vs_eager", "speedup_vs_compile", "time_ms")


def _best_of_trajectory(episode, final: dict | None, task: Task, cfg: HarnessConfig):
    """The best solution of the trajectory, scored; judged again if it was never timed.

    The env keeps its best judged state (by reward, then speedup). A state only checked by
    `run` has no timing; it is judged again with timing so that its speedups count.
    """
    best = episode.best
    if best is None:
        return final, "final" if final else "none"
    if final is not None and (final["correct"], final["speedup_vs_eager"] or 0.0) >= (
        best["correct"],
        best["speedup_vs_eager"] or 0.0,
    ):
        return final, "final"
    if best["correct"] and best["speedup_vs_eager"] is None and best.get("files"):
        with tempfile.TemporaryDirectory(prefix="kb_best_") as tmp:
            sol_dir = write_solution_dir(best["files"], Path(tmp) / "solution")
            verdict = Judge(cfg.judge_config()).evaluate(task, sol_dir, timing=True)
        return _scored(verdict), f"turn {best['turn']}, judged again with timing"
    return {
        "correct": bool(best["correct"]),
        "compiled": True if best["correct"] else None,
        "speedup_vs_eager": best["speedup_vs_eager"],
        "speedup_vs_compile": best["speedup_vs_compile"],
        "time_ms": None,
    }, f"turn {best['turn']}"


def _scored(verdict: Verdict) -> dict:
    """The record fields of a verdict: outcome, reasons, and the verdict itself (trimmed)."""
    return _scored_dict(verdict.to_dict())


def _scored_dict(verdict: dict) -> dict:
    """`_scored` for a verdict already turned into a dict (as in the env's info)."""
    data = dict(verdict)
    data.pop("profile_table", None)
    if data.get("build"):
        data["build"] = dict(data["build"])
        data["build"]["log"] = (data["build"].get("log") or "")[-BUILD_LOG_CHARS:]
    return {
        "correct": bool(data.get("correct")),
        "compiled": bool(data.get("compiled")),
        "speedup_vs_eager": data.get("speedup_vs_eager"),
        "speedup_vs_compile": data.get("speedup_vs_compile"),
        "time_ms": dict(data.get("time_ms") or {}),
        "error": data.get("error"),
        "flags": sorted(data.get("flags") or {}),
        "verdict": data,
    }
