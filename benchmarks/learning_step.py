"""One GRPO learning step with real rewards: TRL's trainer, a tiny random model, real episodes.

The policy's generations are scripted, so that a group holds both kinds of sample on the demo
task (`sigmoid_gated_multiply`): honest completions write the demo's working kernel and
model_new.py and submit (reward >= 1), wrong ones submit an empty workspace or a kernel with a
bug (reward -1). Everything else is real: TRL 1.16's GRPOTrainer renders the tools, parses the
tool calls, runs them on CudaKernel-v0 through agent_trainer's CudaGymToolEnv (compiling and
judging on `--device`), masks the tool results, and takes an optimizer step on the tiny
randomly initialised model with the group-relative advantages. Prints and writes (to `--out`)
the loss, gradient norm, how many parameters changed, the rewards, and the time split between
generation, the environment, scoring (log-probs) and the update.

    python -m benchmarks.learning_step --device cuda --out $OUT/learning_step.json
    python -m benchmarks.learning_step --device cpu --out /tmp/learning_step.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from agent_trainer.config import AgentConfig, RunnerConfig
from agent_trainer.tiny import build_tiny_model, build_tiny_tokenizer
from agent_trainer.trl_env import CudaGymToolEnv, trl_rows
from cuda_gym.demo import CPU_KERNEL, CUDA_BINDING, CUDA_KERNEL, DEMO_TASK, MODEL_NEW

BUG_MARK = "// BUG: the gate is ignored"
CPU_BUG = ("xr[c] / (1.0f + std::exp(-(gr[c] + bp[c])))", "xr[c]")
CUDA_BUG = ("return x / (1.0f + expf(-g));", "return x;")


def call(name: str, **arguments) -> str:
    """One Hermes tool call, as the model would write it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def kernel_files(device: str, buggy: bool) -> dict[str, str]:
    """The demo's solution files; with `buggy`, the kernel ignores the gate (wrong output)."""
    if device == "cuda":
        kernel = CUDA_KERNEL
        old, new = CUDA_BUG
        files = {"kernels/gated.cu": kernel, "kernels/binding.cpp": CUDA_BINDING}
        path = "kernels/gated.cu"
    else:
        kernel = CPU_KERNEL
        old, new = CPU_BUG
        files = {"kernels/gated.cpp": kernel}
        path = "kernels/gated.cpp"
    if buggy:
        if old not in kernel:
            raise RuntimeError(f"the demo kernel changed; update the bug for {device}")
        files[path] = BUG_MARK + "\n" + kernel.replace(old, new)
    files["model_new.py"] = MODEL_NEW
    return files


def scripts(device: str) -> dict[str, list[str]]:
    """The replies of each kind of rollout, one per turn (one tool call each), then "Done."."""
    def writes(buggy):
        files = kernel_files(device, buggy)
        # The bugged file first: later turns tell a buggy rollout by the mark in its first write.
        order = sorted(files, key=lambda p: (p == "model_new.py", BUG_MARK not in files[p], p))
        return [call("write_file", path=p, content=files[p]) for p in order]

    return {
        "honest": [*writes(False), call("submit"), "Done."],
        "empty": [call("submit"), "Done."],
        "buggy": [*writes(True), call("submit"), "Done."],
    }


class TimedToolEnv(CudaGymToolEnv):
    """CudaGymToolEnv that adds the seconds its tool calls and `get_reward` take to `seconds`."""

    seconds = 0.0

    def _call(self, name, **arguments):
        start = time.monotonic()
        try:
            return super()._call(name, **arguments)
        finally:
            TimedToolEnv.seconds += time.monotonic() - start

    def get_reward(self) -> float:
        """`CudaGymToolEnv.get_reward`, timed."""
        start = time.monotonic()
        try:
            return super().get_reward()
        finally:
            TimedToolEnv.seconds += time.monotonic() - start


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda",
                        help="where the env judges and the model trains")
    parser.add_argument("--kinds", default=None,
                        help="comma-separated rollout kinds of the group, from honest, empty, "
                        "buggy (default: honest,empty,honest,buggy on cuda, honest,empty on cpu)")
    parser.add_argument("--steps", type=int, default=1, help="optimizer steps")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--fast-judge", action="store_true",
                        help="judge with 2 input sets, 3 timed runs and the eager baseline only "
                        "(CPU tests); the default is cuda_gym's full judge")
    parser.add_argument("--out", required=True, help="summary JSON path")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    """Run the learning step(s); print and write the summary."""
    args = parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_chat_template

    kinds = (args.kinds or ("honest,empty,honest,buggy" if args.device == "cuda"
                            else "honest,empty")).split(",")
    replies = scripts(args.device)
    unknown = set(kinds) - set(replies)
    if unknown:
        raise SystemExit(f"unknown rollout kinds {sorted(unknown)}; use {sorted(replies)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda needs a CUDA GPU")

    tok = build_tiny_tokenizer()
    tok.chat_template = qwen3_chat_template  # a tool-calling template TRL can parse
    longest = max(len(tok.encode("".join(r), add_special_tokens=False)) for r in replies.values())
    env_kwargs = {"device": args.device, "max_turns": 8}
    if args.fast_judge:
        env_kwargs["judge"] = {"correctness_trials": 2, "warmup_runs": 1, "timed_runs": 3,
                               "baselines": ["eager"]}
    config = AgentConfig(
        env_id="cuda_gym:CudaKernel-v0",
        env_kwargs=env_kwargs,
        runner=RunnerConfig(max_turns=8),
    )
    label = json.dumps({"task_id": DEMO_TASK, "seed": 0})
    model = build_tiny_model(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    out_dir = Path(tempfile.mkdtemp(prefix="learning_step-"))
    grpo = GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=len(kinds),
        num_generations=len(kinds),
        max_steps=args.steps,
        learning_rate=args.lr,
        # Room for the scripted replies (byte-level tokens) and the tool results after them.
        max_completion_length=longest + 48 * 1024,
        max_tool_calling_iterations=8,
        use_cpu=args.device == "cpu",
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        args=grpo,
        train_dataset=Dataset.from_list(
            trl_rows([{"prompt": "", "label": label}] * args.steps, config)),
        processing_class=tok,
        environment_factory=lambda: TimedToolEnv(config),
    )

    clock = {"generation_s": 0.0, "generate_and_score_s": 0.0, "rollouts": []}

    def scripted_policy(prompt_ids, images, multimodal_fields, num_generations, **kw):
        # Turn n of a rollout (n tool results so far) gets its kind's n-th reply, then EOS.
        start = time.monotonic()
        texts = [tok.decode(ids, skip_special_tokens=False) for ids in prompt_ids]
        out = []
        for i, text in enumerate(texts):
            turn = text.count("<tool_response>")
            if turn == 0:
                kind = kinds[i % len(kinds)]
                clock["rollouts"].append(kind)
            elif BUG_MARK in text:
                kind = "buggy"
            elif "write_file" in text.split("<|im_start|>assistant", 1)[-1]:
                kind = "honest"
            else:
                kind = "empty"
            reply = replies[kind][min(turn, len(replies[kind]) - 1)]
            out.append(tok.encode(reply, add_special_tokens=False) + [tok.eos_token_id])
        clock["generation_s"] += time.monotonic() - start
        return out, None

    generate_and_score = trainer._generate_and_score_completions

    def timed_generate_and_score(*a, **kw):
        start = time.monotonic()
        try:
            return generate_and_score(*a, **kw)
        finally:
            clock["generate_and_score_s"] += time.monotonic() - start

    trainer._generate_single_turn = scripted_policy
    trainer._generate_and_score_completions = timed_generate_and_score
    start = time.monotonic()
    trainer.train()
    total_s = time.monotonic() - start

    changed = {n: (p.detach().cpu() - before[n].cpu()).abs().max().item()
               for n, p in trainer.model.named_parameters()}
    rewards = [env.session.reward for env in trainer._environment_pool[None]
               if env.session is not None]
    stop_reasons = [env.session.stop_reason for env in trainer._environment_pool[None]
                    if env.session is not None]
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    env_s = TimedToolEnv.seconds
    scoring_s = clock["generate_and_score_s"] - clock["generation_s"] - env_s
    summary = {
        "benchmark": "learning_step",
        "device": args.device,
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "task": DEMO_TASK,
        "judge": env_kwargs.get("judge", "cuda_gym default"),
        "rollout_kinds": clock["rollouts"],
        "episode_rewards_last_step": rewards,
        "stop_reasons_last_step": stop_reasons,
        "steps": args.steps,
        "learning_rate": args.lr,
        "loss": [e["loss"] for e in logs],
        "grad_norm": [e.get("grad_norm") for e in logs],
        "reward_mean": [e.get("reward") for e in logs],
        "reward_std": [e.get("reward_std") for e in logs],
        "completion_mean_length": [e.get("completions/mean_length") for e in logs],
        "tool_calls_per_rollout": [e.get("tools/call_frequency") for e in logs],
        "parameters": len(changed),
        "parameters_changed": sum(v > 0 for v in changed.values()),
        "max_abs_change": max(changed.values()),
        "time_s": {
            "generation": round(clock["generation_s"], 3),
            "environment": round(env_s, 3),
            "scoring": round(scoring_s, 3),
            "update": round(total_s - clock["generate_and_score_s"], 3),
            "total": round(total_s, 3),
        },
    }
    text = json.dumps(summary, indent=2)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
