"""ScriptedJudge: a judge stand-in for env, vector, single-turn and agent tests (no building).

It has the members the env and the tools use (`cuda_gym.judge.client.JudgeLike`) and decides
from the workspace's files, so a test drives an episode with ordinary tool calls:

- `build`: fails with the line of the first `#error` in a kernels/ source, else succeeds.
- `evaluate`: rejects a workspace without `model_new.py` or one whose `model_new.py` contains
  `NotImplementedError` (the template), `WRONG` (an incorrect output) or `CRASH` (the candidate
  process died); otherwise accepts with
  the judge's own reward function applied to the scripted speedups (timed calls only).

Every call is recorded in `calls` as (kind, files, timing) so tests can check what was judged.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from cuda_gym.judge import BuildResult, Verdict, compute_reward


class ScriptedJudge:
    """A deterministic judge that never compiles or starts a process.

    Args:
        device: The device it claims to judge on ("cpu" or "cuda").
        speedup_vs_eager: Speedup reported for a correct, timed candidate.
        speedup_vs_compile: Speedup vs torch.compile reported likewise.
        delay_s: Seconds each build/evaluate sleeps (concurrency tests).
        tolerance_mode: Recorded in every verdict.
    """

    def __init__(
        self,
        device: str = "cpu",
        *,
        speedup_vs_eager: float = 1.5,
        speedup_vs_compile: float = 1.2,
        delay_s: float = 0.0,
        tolerance_mode: str = "strict",
    ) -> None:
        self.device = device
        self.device_name = f"scripted {device}"
        self.speedup_vs_eager = speedup_vs_eager
        self.speedup_vs_compile = speedup_vs_compile
        self.delay_s = delay_s
        self.tolerance_mode = tolerance_mode
        self.calls: list[tuple[str, dict[str, str], bool]] = []
        self._lock = threading.Lock()

    def __deepcopy__(self, memo):
        # A judge is a shared service: gymnasium copies an env's spec (with its kwargs), and the
        # copy must judge through the same object.
        return self

    def _files(self, root: Path) -> dict[str, str]:
        return {
            str(p.relative_to(root)): p.read_text(errors="replace")
            for p in sorted(root.rglob("*"))
            if p.is_file() and (p.name == "model_new.py" or p.parts[-2:-1] == ("kernels",))
        }

    def _record(self, kind: str, root: Path, timing: bool) -> dict[str, str]:
        files = self._files(root)
        with self._lock:
            self.calls.append((kind, files, timing))
        if self.delay_s:
            time.sleep(self.delay_s)
        return files

    def build(self, solution_dir) -> BuildResult:
        files = self._record("build", Path(solution_dir), False)
        sources = tuple(k for k in files if k.startswith("kernels/"))
        for name in sources:
            for number, line in enumerate(files[name].splitlines(), 1):
                if line.strip().startswith("#error"):
                    return BuildResult(
                        ok=False,
                        module_dir=None,
                        errors=f"{name}:{number}: {line.strip()}",
                        sources=sources,
                    )
        module_dir = str(Path(solution_dir) / "kernels") if sources else None
        return BuildResult(ok=True, module_dir=module_dir, sources=sources, duration_s=0.01)

    def evaluate(self, task, solution_dir, *, timing: bool = True, profile: bool = False):
        files = self._record("evaluate", Path(solution_dir), timing)
        verdict = Verdict(
            tolerance_mode=self.tolerance_mode,
            device=self.device,
            device_name=self.device_name,
            trials=5,
            stage_times_s={"wait.build": 0.0, "wait.slot": 0.0},
        )
        source = files.get("model_new.py")
        if source is None:
            verdict.error = "model_new.py is missing: write a class ModelNew in it."
        elif "NotImplementedError" in source:
            verdict.compiled = True
            verdict.stage = "run"
            verdict.error = "NotImplementedError: ModelNew is not written yet"
        elif "CRASH" in source:
            verdict.compiled = True
            verdict.stage = "run"
            verdict.error = "The candidate process died of signal SIGSEGV during stage 'run'."
        elif "WRONG" in source:
            verdict.compiled = True
            verdict.stage = "compare"
            verdict.max_abs_error = verdict.max_rel_error = 1.0
            verdict.error = "Incorrect output: trial 0 output 0: 1024 of 1024 values differ"
        else:
            verdict.compiled = verdict.correct = True
            verdict.stage = "done"
            verdict.max_abs_error = verdict.max_rel_error = 0.0
            if timing:
                verdict.speedup_vs_eager = self.speedup_vs_eager
                verdict.speedup_vs_compile = self.speedup_vs_compile
                verdict.time_ms = {
                    "candidate": 1.0,
                    "eager": self.speedup_vs_eager,
                    "compile": self.speedup_vs_compile,
                }
            if profile:
                verdict.profile_table = "kernel            time\nscripted_kernel   1.0 ms"
        verdict.reward = compute_reward(
            "milestone", verdict.correct, verdict.speedup_vs_eager, verdict.speedup_vs_compile
        )
        verdict.verdict = "accept" if verdict.correct else "reject"
        return verdict
