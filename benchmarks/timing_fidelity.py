"""Timing fidelity of the judge: repeatability, agreement with the profiler, side streams.

Run::

    python -m benchmarks.timing_fidelity --device cuda \\
        --out benchmarks/results/timing_fidelity_h200.json

1. The demo task's fused kernel judged N times: spread (max - min) / median of the candidate
   time (target <= 2 %).
2. Judge time against the profiler's summed kernel time per call (target within 5 %).
3. The same kernel launched on a side stream the candidate created: its judged time must match
   the same-stream kernel (work on any stream is counted).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from cuda_gym.demo import CPU_KERNEL, CUDA_BINDING, CUDA_KERNEL, DEMO_TASK, MODEL_NEW
from cuda_gym.judge import Flag, Judge, JudgeConfig
from cuda_gym.tasks import builtin_task

SIDE_STREAM_BINDING = CUDA_BINDING.replace(
    "at::cuda::getCurrentCUDAStream());",
    "side_stream());",
).replace(
    "torch::Tensor gated_multiply(",
    """// The kernel runs on a stream of its own that waits for the inputs (written on the current
// stream) but is never joined back: the caller's stream sees no work.
static cudaStream_t side_stream() {
  static cudaStream_t s = nullptr;
  static cudaEvent_t inputs_ready = nullptr;
  if (s == nullptr) {
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming);
  }
  cudaEventRecord(inputs_ready, at::cuda::getCurrentCUDAStream());
  cudaStreamWaitEvent(s, inputs_ready, 0);
  return s;
}

torch::Tensor gated_multiply(""",
)


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    judge = Judge(JudgeConfig(device=args.device))
    task = builtin_task(DEMO_TASK).for_device(args.device)
    tmp = Path(tempfile.mkdtemp(prefix="timing_fidelity_"))
    if args.device == "cuda":
        files = {"kernels/gated.cu": CUDA_KERNEL, "kernels/binding.cpp": CUDA_BINDING}
    else:
        files = {"kernels/gated.cpp": CPU_KERNEL}
    same = write(tmp / "same", {**files, "model_new.py": MODEL_NEW})

    result = {
        "command": f"python -m benchmarks.timing_fidelity --device {args.device} "
        f"--repeats {args.repeats} --out {args.out}",
        "device": args.device,
        "torch": torch.__version__,
        "runs": [],
    }
    out = Path(args.out)
    times, profiled = [], []
    for i in range(args.repeats):
        start = time.monotonic()
        verdict = judge.evaluate(task, same, timing=True, profile=True)
        seconds = time.monotonic() - start
        if not verdict.correct:
            raise SystemExit(f"the reference kernel was rejected: {verdict.error}")
        times.append(verdict.time_ms["candidate"])
        profiled.append(verdict.flags.get(Flag.PROFILE_KERNEL_MS_PER_CALL))
        result["runs"].append(run_record(verdict, seconds))
        print(
            f"run {i}: candidate {times[-1]:.4f} ms, profiler {profiled[-1]} ms, "
            f"SM clock {result['runs'][-1]['sm_clock_mhz_after']} MHz, judged in {seconds:.1f} s",
            flush=True,
        )
        summarise(result, times, profiled, verdict)
        out.write_text(json.dumps(result, indent=1))  # kept after every run: a cut run still counts
    median = statistics.median(times)
    if args.device == "cuda":
        side = write(
            tmp / "side",
            {
                "kernels/gated.cu": CUDA_KERNEL,
                "kernels/binding.cpp": SIDE_STREAM_BINDING,
                "model_new.py": MODEL_NEW,
            },
        )
        side_verdict = judge.evaluate(task, side, timing=True)
        result["side_stream"] = {
            "verdict": side_verdict.verdict,
            "error": side_verdict.error,
            "candidate_ms": side_verdict.time_ms["candidate"],
            "side_work_flag": side_verdict.flags.get(Flag.SIDE_WORK),
            "vs_same_stream_pct": 100 * (side_verdict.time_ms["candidate"] - median) / median
            if side_verdict.time_ms["candidate"]
            else None,
        }
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    out.write_text(json.dumps(result, indent=1))


def run_record(verdict, seconds: float) -> dict:
    """One judgement: the timer's statistics, the clocks, where the judge's seconds went."""
    timing = verdict.flags.get(Flag.CANDIDATE_TIMING) or {}
    return {
        "candidate_ms": verdict.time_ms["candidate"],
        "min_ms": timing.get("min_ms"),
        "max_ms": timing.get("max_ms"),
        "host_median_ms": timing.get("host_median_ms"),
        "empty_call_ms": timing.get("round_trip_ms"),
        "runner_event_ms": timing.get("runner_event_ms"),  # with CUDA_GYM_TRACE_EVENTS=1
        "runner_trace_ms": timing.get("runner_trace_ms"),
        "warmup_calls": timing.get("warmup_calls"),
        "sm_clock_mhz_after": timing.get("sm_clock_mhz_after"),
        "profiler_kernel_ms": verdict.flags.get(Flag.PROFILE_KERNEL_MS_PER_CALL),
        "gpu_state": verdict.flags.get(Flag.GPU_STATE),
        "judge_seconds": round(seconds, 2),
        "stage_times_s": verdict.stage_times_s,
    }


def summarise(result: dict, times: list, profiled: list, verdict) -> None:
    median = statistics.median(times)
    result.update(
        device_name=verdict.device_name,
        candidate_ms=times,
        median_ms=median,
        spread_pct=100 * (max(times) - min(times)) / median,
        kernels=verdict.flags.get(Flag.KERNELS),
    )
    kernel_ms = [p for p in profiled if p is not None]
    if kernel_ms:
        result["profiler_kernel_ms"] = statistics.median(kernel_ms)
        result["judge_vs_profiler_pct"] = (
            100 * (median - result["profiler_kernel_ms"]) / result["profiler_kernel_ms"]
        )


if __name__ == "__main__":
    main()
