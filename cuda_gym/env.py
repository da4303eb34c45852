"""CudaKernelEnv: one episode = one task, played through tool calls; rewarded by the judge."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from cuda_gym.actions import FORMAT_HELP, parse_action
from cuda_gym.config import EnvConfig
from cuda_gym.errors import ConfigError, EnvStateError, UnknownTaskError
from cuda_gym.judge import JudgeConfig, Verdict
from cuda_gym.judge.client import JudgeClient, JudgeLike
from cuda_gym.judge.device import resolve_device
from cuda_gym.skills import skills_for_device
from cuda_gym.spaces import AgentText
from cuda_gym.tasks import Task, load_task, resolve_task_source
from cuda_gym.tools import TOOLS, ToolContext, ToolResult, execute_call, tool_schemas
from cuda_gym.tools.base import truncate_text
from cuda_gym.tools.skills import catalogue
from cuda_gym.workspace import Workspace

logger = logging.getLogger(__name__)

MAX_ACTION_CHARS = 1_000_000


class CudaKernelEnv(gym.Env[str, Any]):
    """A CUDA (or C++) kernel-development sandbox for LLM agents.

    ## Description
    Each episode gives the agent one KernelBench-format task: a PyTorch `Model` to be
    re-implemented as `ModelNew` in `model_new.py`, computing with its own kernels in
    `kernels/` (CUDA on `device="cuda"`, C++/OpenMP on `device="cpu"`). The agent works in a
    private workspace through tools: `list_files`, `read_file`, `write_file`, `edit_file`,
    `compile`, `run`, `profile`, `read_skill` and `submit`.

    ## Action
    A `str` of assistant text holding `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
    blocks or `<function=NAME><parameter=KEY>VALUE</parameter></function>` blocks, or already
    parsed calls: a `{"name", "arguments"}` dict, an OpenAI tool call, an assistant message with
    `tool_calls`, or a list of these. Several calls in one action run in order. A malformed
    action never raises: it returns an error observation with the expected format and counts
    as invalid.

    ## Observation
    Text: at reset, the task statement (reference code, workspace, skills, tools, budget); after
    a step, the output of each tool call, bounded by `max_observation_chars`.

    ## Reward
    0 on every step but the last. The last step (submit, or truncation when
    `judge_on_truncation`) is judged and rewarded with the milestone reward: -1 incorrect or not
    built; 1 correct; 2 correct and >5 % faster than eager PyTorch; 3 correct and >5 % faster
    than both eager and torch.compile. On truncation, the workspace as it stands is judged.

    ## Episode End
    `terminated` after `submit`. `truncated` after `max_turns` steps, `time_budget_s` seconds of
    wall-clock, or `max_invalid_actions` malformed actions; `info["stop_reason"]` is one of
    "submit", "max_turns", "time_budget", "invalid_actions".

    ## Info
    `turn`, `task_id`, `device`, `elapsed_s`, `tool_calls` (parsed), `tool_results` (structured
    results per call), `messages` (OpenAI-format tool messages), `parse_errors`,
    `invalid_action`, `invalid_action_count`, `timings` (seconds per tool this step),
    `stop_reason`, `best` (best judged state so far), `judge_wait_s` (seconds this step waited
    for a judge slot), and at the end `reward_components` and `verdict`. At reset: `task_id`,
    `task_hash`, `device`, `tools` (OpenAI schemas), `skills`.

    ## Concurrency
    Many envs may share one process: each has its own lock and, for `areset`/`astep`, its own
    worker thread, so a slow judge call in one env never delays another env's file tools.
    Judge calls of all envs in a process share `timed_judge_slots` and `untimed_judge_slots`
    (judge/client.py). `gym.make_vec("CudaKernel-v0", num_envs=N,
    vectorization_mode="vector_entry_point")` steps N envs on a thread pool (vector.py).

    ## Arguments
    `config` (an `EnvConfig`) and/or any EnvConfig field by name, e.g.
    `gym.make("CudaKernel-v0", device="cpu", task="gelu_scale_residual", max_turns=20)`.
    `reset(seed=..., options={"task_id": ...})` picks the task of one episode.
    `judge=` takes a `JudgeConfig` or a judge object (`cuda_gym.judge.client.JudgeLike`: anything
    with `device`, `device_name`, `slot`, `build` and `evaluate`), e.g. a scripted judge in tests.

    ## Version History
    - v0: first release.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(
        self, config: EnvConfig | None = None, render_mode: str | None = None, **overrides: Any
    ) -> None:
        injected = overrides.get("judge")
        if injected is not None and not isinstance(injected, JudgeConfig):
            if not isinstance(injected, JudgeLike):
                raise ConfigError(
                    "judge must be a JudgeConfig or a judge object with device, device_name, "
                    f"slot, build and evaluate (cuda_gym.judge.client.JudgeLike); got {injected!r}"
                )
            overrides.pop("judge")
        else:
            injected = None
        self.config = EnvConfig.from_kwargs(config, **overrides)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        self.render_mode = render_mode
        if injected is not None:
            if self.config.device not in ("auto", injected.device):
                raise ConfigError(
                    f"device={self.config.device!r} but the judge given runs on "
                    f"{injected.device!r}; leave device='auto' or make them agree."
                )
            if self.config.judge is not None:
                raise ConfigError("give either a judge object or EnvConfig.judge, not both")
            self.device = injected.device
            self.judge: JudgeLike = injected
        else:
            self.device = resolve_device(self.config.device)
            self.judge = JudgeClient(
                self.config.judge_config(self.device),
                timed_slots=self.config.timed_judge_slots,
                untimed_slots=self.config.untimed_judge_slots,
            )
        self.skills = {s.name: s for s in skills_for_device(self.device)}
        self.action_space = AgentText(MAX_ACTION_CHARS)
        self.observation_space = AgentText(self.config.max_observation_chars + 2000)
        self._fixed_task = load_task(self.config.task) if self.config.task else None
        self._task_set = (
            None if self._fixed_task else resolve_task_source(self.config.task_source, self.device)
        )
        self._lock = threading.RLock()
        self._executor: ThreadPoolExecutor | None = None
        self._workspace: Workspace | None = None
        self._ctx: ToolContext | None = None
        self._task: Task | None = None
        self._done = False
        self._last_obs = ""
        self.best: dict | None = None

    # -- episode control ------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict]:
        """Start an episode; `options={"task_id": ...}` selects the task (else one is sampled)."""
        with self._lock:
            super().reset(seed=seed)
            self._close_workspace()
            task = self._choose_task(options or {}).for_device(self.device)
            self._task = task
            self._workspace = Workspace(
                task.source, list(self.skills.values()), self.device, self.config.workspace_dir
            )
            self._ctx = ToolContext(
                workspace=self._workspace,
                task=task,
                judge=self.judge,
                skills=self.skills,
                max_output_chars=self.config.max_observation_chars,
            )
            self._turn = 0
            self._invalid = 0
            self._start = time.monotonic()
            self._done = False
            self.best = None
            obs = self._task_statement()
            self._last_obs = obs
            info = {
                "task_id": task.task_id,
                "task_hash": task.content_hash,
                "device": self.device,
                "device_name": self.judge.device_name,
                "tools": tool_schemas(),
                "skills": [
                    {"name": s.name, "description": s.description} for s in self.skills.values()
                ],
                "max_turns": self.config.max_turns,
                "time_budget_s": self.config.time_budget_s,
            }
            if self.render_mode == "human":
                self.render()
            return obs, info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        """Run the tool call(s) in `action`; see the class docstring for the contract."""
        with self._lock:
            if self._workspace is None:
                raise EnvStateError("Call reset() before step().")
            if self._done:
                raise EnvStateError("The episode has ended; call reset() to start a new one.")
            self._turn += 1
            parsed = parse_action(action, max_chars=MAX_ACTION_CHARS)
            results: list[ToolResult] = []
            sections: list[str] = []
            if not parsed.calls or parsed.errors:
                problems = "\n".join(f"- {e}" for e in parsed.errors)
                sections.append(f"Invalid action:\n{problems}\n\n{FORMAT_HELP}")
            terminated = False
            for call in parsed.calls:
                result = execute_call(self._ctx, call)
                results.append(result)
                header = f"[{call.name}]" if len(parsed.calls) > 1 else ""
                sections.append(f"{header}\n{result.text}".strip())
                if result.verdict is not None:
                    self._track_best(result.verdict)
                if result.ends_episode:
                    terminated = True
                    break
            invalid = bool(parsed.errors) or not parsed.calls or any(r.invalid for r in results)
            self._invalid += int(invalid)

            stop_reason = "submit" if terminated else self._truncation_reason()
            truncated = stop_reason is not None and not terminated
            final: Verdict | None = next(
                (r.verdict for r in results if r.ends_episode and r.verdict), None
            )
            truncation_wait: dict = {}
            if truncated and self.config.judge_on_truncation:
                self._workspace.restore_protected()
                final = self.judge.evaluate(self._task, self._workspace.root, timing=True)
                truncation_wait["judge_wait_s"] = round(final.waited_s(), 4)
                self._track_best(final)
                sections.append(
                    f"Episode truncated ({stop_reason}); the workspace as it stands was judged: "
                    f"reward {final.reward:g} ({final.verdict})."
                )
            elif truncated:
                sections.append(f"Episode truncated ({stop_reason}).")
            if invalid and not (terminated or truncated):
                left = self.config.max_invalid_actions - self._invalid
                sections.append(
                    f"(invalid actions: {left} of {self.config.max_invalid_actions} left)"
                )
            reward = float(final.reward) if final is not None else 0.0
            self._done = terminated or truncated

            obs = truncate_text("\n\n".join(sections), self.config.max_observation_chars)
            self._last_obs = obs
            info = self._step_info(parsed, results, invalid, stop_reason, final)
            info["judge_wait_s"] = round(
                sum(r.data.get("judge_wait_s", 0.0) for r in results)
                + truncation_wait.get("judge_wait_s", 0.0),
                4,
            )
            if self.render_mode == "human":
                self.render()
            return obs, reward, terminated, truncated, info

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict]:
        """`reset` in this env's own worker thread, for asyncio rollout loops."""
        call = functools.partial(self.reset, seed=seed, options=options)
        return await asyncio.get_running_loop().run_in_executor(self._step_executor(), call)

    async def astep(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        """`step` in this env's own worker thread, so slow tools do not block the event loop.

        Each env has a thread of its own rather than a share of asyncio's default executor
        (min(32, cores + 4) threads): with more envs than that, envs waiting for the judge
        would otherwise hold every thread and stall other envs' cheap tools.
        """
        call = functools.partial(self.step, action)
        return await asyncio.get_running_loop().run_in_executor(self._step_executor(), call)

    def render(self) -> str | None:
        """Return the last observation ("ansi"), or print it ("human")."""
        if self.render_mode == "human":
            print(self._last_obs)
            return None
        return self._last_obs

    def close(self) -> None:
        """Delete the workspace and stop the env's worker thread; safe to call more than once."""
        with self._lock:
            self._close_workspace()
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
        super().close()

    # -- internals ---------------------------------------------------------------------------

    @property
    def workspace(self) -> Workspace | None:
        """The current episode's workspace (None before reset and after close)."""
        return self._workspace

    @property
    def last_observation(self) -> str:
        """The observation returned by the last reset or step ("" before the first reset)."""
        return self._last_obs

    @property
    def task(self) -> Task | None:
        """The current episode's task."""
        return self._task

    def _step_executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="cuda_gym_env")
            return self._executor

    def _close_workspace(self) -> None:
        if self._workspace is not None:
            self._workspace.close()
            self._workspace = None
            self._ctx = None

    def _choose_task(self, options: dict) -> Task:
        task_id = options.get("task_id") or options.get("task")
        if task_id is not None:
            return self._lookup(task_id)
        if self._fixed_task is not None:
            return self._fixed_task
        ids = list(self.config.task_ids or self._task_set.ids())
        return self._lookup(ids[int(self.np_random.integers(len(ids)))])

    def _lookup(self, task_id) -> Task:
        """A task of the task source by id, else a built-in id, file path or source text."""
        if self._task_set is not None and isinstance(task_id, str) and task_id in self._task_set:
            return self._task_set.get(task_id)
        try:
            return load_task(task_id)
        except UnknownTaskError:
            if self._task_set is None:
                raise
            raise UnknownTaskError(
                f"Unknown task {task_id!r}: not in task source {self._task_set.name!r} "
                "and not a built-in id or a file."
            ) from None

    def _truncation_reason(self) -> str | None:
        if self._invalid >= self.config.max_invalid_actions:
            return "invalid_actions"
        if self._turn >= self.config.max_turns:
            return "max_turns"
        if time.monotonic() - self._start >= self.config.time_budget_s:
            return "time_budget"
        return None

    def _track_best(self, verdict: Verdict) -> None:
        score = (verdict.reward, verdict.speedup_vs_eager or 0.0)
        if self.best is not None and score <= (
            self.best["reward"],
            self.best["speedup_vs_eager"] or 0.0,
        ):
            return
        files = {}
        for entry in self._workspace.list_files():
            if entry.writable:
                files[entry.path] = (self._workspace.root / entry.path).read_text(errors="replace")
        self.best = {
            "turn": self._turn,
            "reward": verdict.reward,
            "correct": verdict.correct,
            "speedup_vs_eager": verdict.speedup_vs_eager,
            "speedup_vs_compile": verdict.speedup_vs_compile,
            "files": files,
        }

    def _step_info(self, parsed, results, invalid, stop_reason, final) -> dict:
        info: dict[str, Any] = {
            "task_id": self._task.task_id,
            "device": self.device,
            "turn": self._turn,
            "elapsed_s": time.monotonic() - self._start,
            "tool_calls": [
                {"name": c.name, "arguments": c.arguments, "id": c.call_id} for c in parsed.calls
            ],
            "tool_results": [
                {"name": r.name, "ok": r.ok, "invalid": r.invalid, **r.data} for r in results
            ],
            "messages": [
                {"role": "tool", "tool_call_id": c.call_id, "name": c.name, "content": r.text}
                for c, r in zip(parsed.calls, results)
            ],
            "parse_errors": list(parsed.errors),
            "invalid_action": invalid,
            "invalid_action_count": self._invalid,
            "timings": {r.name: round(r.duration_s, 4) for r in results},
            "stop_reason": stop_reason,
            "best": None
            if self.best is None
            else {k: v for k, v in self.best.items() if k != "files"},
        }
        if final is not None:
            info["reward_components"] = {
                "compiled": final.compiled,
                "correct": final.correct,
                "speedup_vs_eager": final.speedup_vs_eager,
                "speedup_vs_compile": final.speedup_vs_compile,
                "time_ms": dict(final.time_ms),
                "reward": final.reward,
                "tolerance_mode": final.tolerance_mode,
            }
            info["verdict"] = final.to_dict()
        return info

    def _task_statement(self) -> str:
        task = self._task
        lang = "CUDA" if self.device == "cuda" else "C++ (OpenMP)"
        files = "kernels/*.cu, *.cuh, *.cpp, *.h" if self.device == "cuda" else "kernels/*.cpp, *.h"
        tools = "\n".join(f"- {t.name}: {t.description}" for t in TOOLS.values())
        return f"""# Task {task.task_id} (device: {self.device})
{task.description}

Write `ModelNew` in model_new.py: same constructor and forward signature as `Model` below, same
results, faster, with the computation done by your own {lang} kernels ({files}). The compile
tool builds kernels/ into a module you import in model_new.py as `import kernels_ext`.

## model.py (the reference; read-only)
```python
{task.source.rstrip()}
```

## Workspace
model.py (read-only), model_new.py (yours), kernels/ (yours), skills/ (read-only).

## Skills (read_skill NAME; start with `workspace`)
{catalogue(self._ctx)}

## Tools
{tools}

## Reward
On submit (or when the budget runs out): -1 incorrect, 1 correct, 2 correct and >5% faster than
eager PyTorch, 3 correct and >5% faster than both eager and torch.compile.
Budget: {self.config.max_turns} turns, {self.config.time_budget_s:g} s, \
{self.config.max_invalid_actions} invalid actions.

{FORMAT_HELP}
"""
