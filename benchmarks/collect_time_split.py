"""Time split per turn between generation and the environment in `collect`, on one device.

Two policies play real CudaKernel-v0 episodes: a tiny randomly initialised Hugging Face model
(built offline; it cannot call tools, so its turns are invalid actions and the env truncates and
judges), and the scripted demo agent (its turns write, compile, run, profile and submit). Writes
JSON with per-policy summaries (generation and env seconds per turn, per-tool env seconds).

    python -m benchmarks.collect_time_split --device cuda --out $OUT/collect_time_split.json
"""

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch

from agent_trainer.collect import collect_episodes
from agent_trainer.config import RunnerConfig
from agent_trainer.episode import Generation
from agent_trainer.policies import HFGenerate
from agent_trainer.tiny import build_tiny_model, build_tiny_tokenizer
from cuda_gym.demo import DEMO_TASK, scripted_actions


def scripted_generate(tokenizer, device):
    actions = scripted_actions(device)

    async def generate(token_ids, max_tokens, stop):
        text = tokenizer.decode(token_ids, skip_special_tokens=False)
        reply = actions[text.count("<|im_start|>assistant") - 1]
        ids = tokenizer.encode(reply, add_special_tokens=False) + [tokenizer.eos_token_id]
        return Generation(ids, reply, None, "stop")

    return generate


def per_tool(path):
    totals = {}
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        for turn in row["turns"]:
            for name in turn["tool_calls"] or ["(invalid)"]:
                totals.setdefault(name, []).append(turn["env_s"])
    return {k: {"turns": len(v), "mean_env_s": sum(v) / len(v)} for k, v in totals.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--tokens-per-turn", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    tok = build_tiny_tokenizer()
    model = build_tiny_model(tok)
    label = json.dumps({"task_id": DEMO_TASK, "seed": 0})
    result = {
        "device": args.device,
        "torch": torch.__version__,
        "python": sys.version,
        "host": platform.node(),
        "task": DEMO_TASK,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
    with tempfile.TemporaryDirectory() as tmp:
        runner = RunnerConfig(
            max_turns=args.max_turns, max_length=32768, max_tokens_per_turn=args.tokens_per_turn
        )
        out = Path(tmp) / "random.jsonl"
        start = time.monotonic()
        summary = asyncio.run(
            collect_episodes(
                lambda: gym.make(
                    "cuda_gym:CudaKernel-v0", device=args.device, max_turns=args.max_turns
                ),
                HFGenerate(model, tok, 1.0, args.device),
                tok,
                runner,
                [label],
                args.episodes,
                out,
                args.concurrency,
            )
        )
        result["random_tiny_model"] = {
            **summary,
            "per_tool": per_tool(out),
            "wall_s": time.monotonic() - start,
        }
        out = Path(tmp) / "scripted.jsonl"
        runner = RunnerConfig(max_turns=20, max_length=65536, max_tokens_per_turn=16000)
        summary = asyncio.run(
            collect_episodes(
                lambda: gym.make("cuda_gym:CudaKernel-v0", device=args.device, max_turns=20),
                scripted_generate(tok, args.device),
                tok,
                runner,
                [label],
                1,
                out,
                1,
            )
        )
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        result["scripted_demo"] = {
            **summary,
            "per_tool": per_tool(out),
            "reward": rows[0]["reward"],
            "stop_reason": rows[0]["stop_reason"],
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
