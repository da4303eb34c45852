"""Policies for `collect`: token-in/token-out `generate` over a local HF model or an endpoint.

The endpoint is any OpenAI-compatible completions server (vLLM, SGLang, ...). It is not
cuda_gym's `OpenAIChatAgent`: RL needs the sampled token ids and their log-probs, so this client
prompts `/completions` with token ids; the chat agent sends messages to `/chat/completions`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from typing import Any

from agent_trainer.episode import Generation


class HFGenerate:
    """`generate` over a Hugging Face causal LM (one sequence at a time, in a worker thread).

    Log-probs are those of the sampling distribution (after temperature).
    """

    def __init__(self, model: Any, tokenizer: Any, temperature: float = 1.0,
                 device: str = "cpu") -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.device = device
        self._lock = threading.Lock()

    async def __call__(self, token_ids: list[int], max_tokens: int,
                       stop: list[str]) -> Generation:
        """Generate one turn."""
        return await asyncio.to_thread(self._generate, token_ids, max_tokens, stop)

    def _generate(self, token_ids: list[int], max_tokens: int, stop: list[str]) -> Generation:
        import torch

        eos = self.tokenizer.eos_token_id
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_tokens,
            "eos_token_id": eos,
            "pad_token_id": self.tokenizer.pad_token_id if self.tokenizer.pad_token_id
            is not None else eos,
            "output_scores": True,
            "return_dict_in_generate": True,
        }
        if self.temperature > 0:
            kwargs.update(do_sample=True, temperature=self.temperature, top_k=0, top_p=1.0)
        else:
            kwargs.update(do_sample=False)
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
        with self._lock, torch.no_grad():
            inputs = torch.tensor([token_ids], device=self.device)
            out = self.model.generate(inputs, attention_mask=torch.ones_like(inputs), **kwargs)
        new = out.sequences[0, len(token_ids):].tolist()
        logprobs = [torch.log_softmax(score[0].float(), -1)[t].item()
                    for score, t in zip(out.scores, new)]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        stopped = bool(new) and (new[-1] == eos or any(text.endswith(s) for s in stop))
        reason = "stop" if stopped or len(new) < max_tokens else "length"
        return Generation(new, text, logprobs, reason)


class OpenAIGenerate:
    """`generate` over an OpenAI-compatible `/completions` endpoint, prompting with token ids.

    With vLLM (`return_tokens_as_token_ids`), the sampled ids and their log-probs come back
    exactly; otherwise the text is tokenized locally and log-probs are None.
    """

    def __init__(self, endpoint: str, model: str, tokenizer: Any, temperature: float = 1.0,
                 timeout_s: float = 600.0) -> None:
        self.url = endpoint.rstrip("/") + "/completions"
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.timeout_s = timeout_s

    async def __call__(self, token_ids: list[int], max_tokens: int,
                       stop: list[str]) -> Generation:
        """Generate one turn."""
        payload = {"model": self.model, "prompt": list(token_ids), "max_tokens": max_tokens,
                   "temperature": self.temperature, "logprobs": 1,
                   "return_tokens_as_token_ids": True}
        if stop:
            payload["stop"] = list(stop)
        response = await asyncio.to_thread(self._post, payload)
        choice = response["choices"][0]
        text = choice.get("text", "")
        reason = "length" if choice.get("finish_reason") == "length" else "stop"
        lp = choice.get("logprobs") or {}
        tokens = lp.get("tokens") or []
        if tokens and all(str(t).startswith("token_id:") for t in tokens):
            ids = [int(str(t).split(":", 1)[1]) for t in tokens]
            logprobs = [float(x if x is not None else 0.0) for x in lp["token_logprobs"]]
            return Generation(ids, text, logprobs, reason)
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        return Generation(ids, text, None, reason)

    def _post(self, payload: dict) -> dict:
        request = urllib.request.Request(self.url, data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.loads(response.read())
