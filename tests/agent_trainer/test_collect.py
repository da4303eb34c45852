"""collect: real CPU episodes with a tiny random HF model; the OpenAI-compatible policy."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from agent_trainer.cli import main
from agent_trainer.episode import LOG_KEYS
from agent_trainer.policies import OpenAIGenerate
from agent_trainer.tiny import build_tiny_tokenizer


@pytest.mark.slow
def test_collect_real_cpu_episodes_with_a_tiny_random_hf_model(tmp_path, capsys):
    model_dir = tmp_path / "tiny"
    assert main(["tiny-model", "--out", str(model_dir)]) == 0
    assert (model_dir / "config.json").is_file() and (model_dir / "tokenizer.json").is_file()
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"""
run_dir: {tmp_path / 'run'}
model: {model_dir}
stages: [collect]
tasks: {{sources: [builtin], include: [sigmoid_gated_multiply]}}
agent:
  env_kwargs: {{device: cpu, max_turns: 2}}
  runner: {{max_turns: 2, max_tokens_per_turn: 24, max_length: 20000}}
collect: {{episodes: 2, policy: hf, concurrency: 2, device: cpu}}
""")
    capsys.readouterr()
    assert main(["collect", "--config", str(cfg)]) == 0
    path = tmp_path / "run" / "collect" / "trajectories.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == [0, 1]
    assert {json.loads(r["label"])["task_id"] for r in rows} == {"sigmoid_gated_multiply"}
    tok = build_tiny_tokenizer()
    for row in rows:
        assert tuple(row["logs"]) == LOG_KEYS and row["error"] is None
        # The random policy cannot call tools: the env truncates and judges (-1).
        assert row["stop_reason"] == "max_turns" and row["truncated"] and row["reward"] == -1.0
        assert len(row["action_ranges"]) == 2
        assert len(row["rollout_log_probs"]) == len(row["token_ids"])
        for (start, end), turn in zip(row["action_ranges"], row["turns"]):
            assert 0 < end - start <= 24
            text = tok.decode(row["token_ids"][start:end], skip_special_tokens=True)
            assert text == turn["action"]
            assert all(lp <= 0 for lp in row["rollout_log_probs"][start:end])
        assert row["turns"][0]["observation"].startswith("Invalid action")
    summary = json.loads(path.with_suffix(".summary.json").read_text())
    assert summary["episodes"] == 2 and summary["turns"] == 4
    assert summary["generation_s_per_turn"] > 0 and summary["env_s_per_turn"] > 0
    # Nothing here earns a positive reward, so RFT has nothing to keep and says so.
    assert main(["rft", "--config", str(cfg), "--build-only"]) == 2
    assert "no trajectory of 2 passed the RFT filter" in capsys.readouterr().err


class _Completions(BaseHTTPRequestHandler):
    requests = []

    def do_POST(self):  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Completions.requests.append(body)
        if body["model"] == "ids":
            logprobs = {"tokens": ["token_id:65", "token_id:66"], "token_logprobs": [-0.1, -0.2]}
        else:
            logprobs = {"tokens": ["A", "B"], "token_logprobs": [-0.1, -0.2]}
        reply = {"choices": [{"text": "AB", "finish_reason": "length", "logprobs": logprobs}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_openai_compatible_policy_sends_token_ids_and_reads_them_back():
    server = HTTPServer(("127.0.0.1", 0), _Completions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        tok = build_tiny_tokenizer()
        url = f"http://127.0.0.1:{server.server_port}/v1"
        gen = asyncio.run(OpenAIGenerate(url, "ids", tok, 0.7)([1, 2, 3], 2, ["</tool_call>"]))
        assert gen.token_ids == [65, 66] and gen.logprobs == [-0.1, -0.2]
        assert gen.text == "AB" and gen.finish_reason == "length"
        sent = _Completions.requests[-1]
        assert sent["prompt"] == [1, 2, 3] and sent["max_tokens"] == 2
        assert sent["stop"] == ["</tool_call>"] and sent["temperature"] == 0.7
        gen = asyncio.run(OpenAIGenerate(url, "text", tok)([1], 5, []))
        assert gen.token_ids == tok.encode("AB", add_special_tokens=False)
        assert gen.logprobs is None and "stop" not in _Completions.requests[-1]
    finally:
        server.shutdown()
        server.server_close()
