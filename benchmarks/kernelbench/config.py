"""HarnessConfig: which KernelBench problems, which solver, how to judge, where to write."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from cuda_gym.agents.openai_chat import TOOL_MODES
from cuda_gym.errors import ConfigError
from cuda_gym.judge import JudgeConfig
from cuda_gym.judge.config import MODES

AGENTS = ("openai", "scripted", "replay")
HARNESS_VERSION = "kernelbench-harness-1"

# Fields that change the results: a resumed run must use the same values (the server's URL
# may change between sessions; the model may not).
RESULT_FIELDS = (
    "agent",
    "model",
    "tool_mode",
    "temperature",
    "max_tokens",
    "solutions_dir",
    "trajectories_dir",
    "reference_as_solution",
    "device",
    "tolerance_mode",
    "max_turns",
    "time_budget_s",
    "warmup_runs",
    "timed_runs",
    "correctness_trials",
    "allow_vendor_libraries",
    "baselines",
)


@dataclass(frozen=True)
class HarnessConfig:
    """One harness run.

    Attributes:
        kernelbench_dir: A KernelBench checkout (holding `KernelBench/level1/...`) or its
            `KernelBench` folder (holding `level1/...`).
        out: Output directory: records/, trajectories/, report.json, report.md, plots/.
        levels: Levels to run.
        problems: Only these problems: ids ("19") or file stems ("19_ReLU"); None = all.
        limit: At most this many problems per level (the lowest ids); None = all.
        agent: "openai" (chat model), "scripted" (plays --solutions-dir through the env) or
            "replay" (plays saved trajectories); None judges solutions directly.
        model: Model name for the openai agent.
        base_url: OpenAI-compatible API root; None reads $OPENAI_BASE_URL.
        api_key_env: Environment variable holding the API key.
        tool_mode: "native" tool calling or "text" (calls parsed from plain replies).
        temperature: Sampling temperature of the openai agent.
        max_tokens: Cap on tokens per reply; None leaves it to the server.
        request_timeout_s: Seconds one model request may take.
        max_retries: Retries of a failed model request.
        solutions_dir: Ready-made solutions named after the problems (`level1/19_ReLU.py`,
            or a folder `level1/19_ReLU/` with model_new.py and kernels/).
        trajectories_dir: Trajectories to replay (`level1/19_ReLU.jsonl`).
        reference_as_solution: Sanity run: judge each reference as its own candidate.
        device: "cuda" or "cpu".
        tolerance_mode: Precision mode: "strict", "paper" or "kernelbench".
        workers: Problems judged at once (child processes); 1 runs them one after another.
        gpus: GPU indices the workers are spread over, round-robin (each worker sees only its
            GPU); None = all workers share the visible GPUs. Workers on one GPU overlap
            everything but their timing (the judge's device gate keeps timings apart).
        max_turns: Turns per agent episode.
        time_budget_s: Wall-clock seconds per agent episode.
        warmup_runs: Untimed calls before timing.
        timed_runs: Timed calls (median reported).
        correctness_trials: Input sets checked per judgement.
        allow_vendor_libraries: Let solutions call cuBLAS/cuDNN through ATen.
        baselines: Baselines to time: "eager" and/or "compile".
        baselines_file: Eager/compile baseline times, read at the start and updated at the end
            (None: `out/baselines.json`).
        shipped_baselines: Also seed the judge's cache from the baseline files that ship with
            the harness (benchmarks/kernelbench/baselines/; used only where GPU and software
            match).
        cache_dir: Judge build/baseline cache (None: $CUDA_GYM_CACHE or ~/.cache/cuda_gym).
        run_timeout_s: Limit for one judge child process.
        fast_worker_start: Fork judge workers from a warm process (JudgeConfig's field of that
            name); off leaves JudgeConfig's default (on for CUDA unless
            $CUDA_GYM_FAST_WORKER_START=0). It changes how fast problems run, not their
            results, so a resumed run may switch it.
        seed: Seed of every episode's reset.
        max_wall_s: Stop starting problems after this many seconds (jobs in flight finish);
            the report is written and marked incomplete; run again to resume. None: no limit.
        plots: Draw the plots (needs matplotlib).
        report_only: Judge nothing: rebuild the report from the run directory's records, with
            the system facts that the run's last invocation recorded (so it works on a machine
            without the run's device, e.g. to draw the plots where matplotlib is).
    """

    kernelbench_dir: Path
    out: Path
    levels: tuple[int, ...] = (1, 2, 3)
    problems: tuple[str, ...] | None = None
    limit: int | None = None
    agent: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    tool_mode: str = "native"
    temperature: float = 0.0
    max_tokens: int | None = None
    request_timeout_s: float = 600.0
    max_retries: int = 4
    solutions_dir: Path | None = None
    trajectories_dir: Path | None = None
    reference_as_solution: bool = False
    device: str = "cuda"
    tolerance_mode: str = "strict"
    workers: int = 1
    gpus: tuple[int, ...] | None = None
    max_turns: int = 40
    time_budget_s: float = 3600.0
    warmup_runs: int = 3
    timed_runs: int = 100
    correctness_trials: int = 5
    allow_vendor_libraries: bool = False
    baselines: tuple[str, ...] = ("eager", "compile")
    baselines_file: Path | None = None
    shipped_baselines: bool = True
    cache_dir: Path | None = None
    run_timeout_s: float = 300.0
    fast_worker_start: bool = False
    seed: int = 0
    max_wall_s: float | None = None
    plots: bool = True
    report_only: bool = False

    def __post_init__(self) -> None:
        for name in (
            "kernelbench_dir",
            "out",
            "solutions_dir",
            "trajectories_dir",
            "baselines_file",
            "cache_dir",
        ):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value).expanduser().resolve())
        if not self.levels or any(level < 1 for level in self.levels):
            raise ConfigError("levels must be a non-empty list of positive level numbers")
        solvers = [
            self.agent is not None,
            self.agent is None and self.solutions_dir is not None,
            self.reference_as_solution,
        ]
        if sum(solvers) != 1:
            raise ConfigError(
                "Choose exactly one solver: --agent openai|scripted|replay, --solutions-dir DIR "
                "(judge ready-made solutions) or --reference-as-solution (sanity run)."
            )
        if self.agent is not None and self.agent not in AGENTS:
            raise ConfigError(f"Unknown agent {self.agent!r}; use one of {AGENTS}")
        if self.agent == "openai" and not self.model:
            raise ConfigError("--agent openai needs --model (the served model's name)")
        if self.agent == "scripted" and self.solutions_dir is None:
            raise ConfigError("--agent scripted needs --solutions-dir: the solutions it writes")
        if self.agent == "replay" and self.trajectories_dir is None:
            raise ConfigError("--agent replay needs --trajectories-dir: the trajectories it plays")
        for name in ("solutions_dir", "trajectories_dir"):
            path = getattr(self, name)
            if path is not None and not path.is_dir():
                raise ConfigError(f"{name.replace('_', '-')} {path} is not a directory")
        if self.tool_mode not in TOOL_MODES:
            raise ConfigError(f"tool_mode must be one of {TOOL_MODES}")
        if self.device not in ("cuda", "cpu"):
            raise ConfigError(f"device must be 'cuda' or 'cpu', got {self.device!r}")
        if self.tolerance_mode not in MODES:
            raise ConfigError(f"tolerance_mode must be one of {MODES}, got {self.tolerance_mode!r}")
        if self.workers < 1:
            raise ConfigError("workers must be at least 1")
        if self.gpus is not None and (not self.gpus or self.workers % len(self.gpus)):
            raise ConfigError(
                f"--gpus names {len(self.gpus)} GPUs but --workers is {self.workers}: "
                "give a multiple of the GPU count, so that every GPU gets as many workers"
            )
        if self.limit is not None and self.limit < 1:
            raise ConfigError("limit must be at least 1")
        self.judge_config()  # validates the timing and trial settings

    def judge_config(self) -> JudgeConfig:
        """The judge configuration of this run."""
        return JudgeConfig(
            device=self.device,
            tolerance_mode=self.tolerance_mode,
            allow_vendor_libraries=self.allow_vendor_libraries,
            correctness_trials=self.correctness_trials,
            warmup_runs=self.warmup_runs,
            timed_runs=self.timed_runs,
            run_timeout_s=self.run_timeout_s,
            baselines=tuple(self.baselines),
            cache_dir=self.cache_dir,
            # Off here leaves JudgeConfig's default ($CUDA_GYM_FAST_WORKER_START, else on for
            # CUDA).
            fast_worker_start=True if self.fast_worker_start else None,
            # Solutions judged here were written elsewhere: the permissive static rules.
            code_rules="external",
            # Speedups against the run's baselines file (shipped or measured once per problem),
            # not against eager timed again with each solution.
            retime_baselines=(),
        )

    @property
    def kind(self) -> str:
        """ "agent", "solutions" or "reference"."""
        if self.agent is not None:
            return "agent"
        return "reference" if self.reference_as_solution else "solutions"

    @property
    def resolved_baselines_file(self) -> Path:
        """baselines_file, or `out/baselines.json`."""
        return self.baselines_file or self.out / "baselines.json"

    def to_dict(self) -> dict:
        """JSON-ready fields (paths as strings)."""
        return {
            k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
            for k, v in asdict(self).items()
        }

    def fingerprint(self) -> dict:
        """The fields that change results; a resumed run must match them."""
        data = self.to_dict()
        return {k: data[k] for k in RESULT_FIELDS}
