"""An agent backed by any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, hosted).

Two tool modes: "native" sends the env's tool schemas and plays the model's `tool_calls`;
"text" sends no schemas and lets the env parse tool calls out of the plain reply (Hermes
`<tool_call>` JSON or the XML-parameter form), for models without native tool calling.
Plain HTTP through the standard library; retries with exponential backoff on connection
errors, timeouts, 408/409/429 and 5xx answers.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from cuda_gym.agents.base import Agent, AgentError, AgentReply
from cuda_gym.errors import ConfigError

logger = logging.getLogger(__name__)

TOOL_MODES = ("native", "text")
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})

NATIVE_SYSTEM_PROMPT = (
    "You are an expert GPU kernel engineer. Solve the task by calling the tools provided: "
    "read the reference, write kernels and model_new.py, compile, run, profile, then submit. "
    "Call one or more tools in every reply."
)
TEXT_SYSTEM_PROMPT = (
    "You are an expert GPU kernel engineer. Solve the task by calling the tools listed in the "
    "task, writing each call in one of the formats the task shows. Call one or more tools in "
    "every reply."
)


@dataclass(frozen=True)
class ChatAgentConfig:
    """How to reach and drive the model.

    Attributes:
        model: Model name sent with every request.
        base_url: API root, e.g. "http://localhost:8000/v1"; None reads $OPENAI_BASE_URL,
            else "https://api.openai.com/v1".
        api_key_env: Environment variable holding the API key (may be unset for local servers).
        tool_mode: "native" (tool schemas and tool_calls) or "text" (calls parsed from text).
        temperature: Sampling temperature.
        max_tokens: Cap on tokens per reply; None leaves it to the server.
        timeout_s: Seconds one request may take.
        max_retries: Further attempts after a retryable failure.
        backoff_s: First retry delay; doubles on each retry.
        system_prompt: Overrides the default system prompt of the tool mode.
        extra_body: Further request fields (e.g. {"top_p": 0.95}).
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    tool_mode: str = "native"
    temperature: float = 0.0
    max_tokens: int | None = None
    timeout_s: float = 600.0
    max_retries: int = 4
    backoff_s: float = 2.0
    system_prompt: str | None = None
    extra_body: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.model:
            raise ConfigError("ChatAgentConfig.model is required (the served model's name)")
        if self.tool_mode not in TOOL_MODES:
            raise ConfigError(f"tool_mode must be one of {TOOL_MODES}, got {self.tool_mode!r}")
        if self.timeout_s <= 0:
            raise ConfigError("timeout_s must be positive")
        if self.max_retries < 0 or self.backoff_s < 0:
            raise ConfigError("max_retries and backoff_s must be >= 0")

    @property
    def resolved_base_url(self) -> str:
        """base_url, else $OPENAI_BASE_URL, else the OpenAI API; without a trailing slash."""
        url = self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        return url.rstrip("/")


class OpenAIChatAgent(Agent):
    """A chat model playing the env through the chat-completions API.

    Args:
        config: The endpoint, model and tool mode.
    """

    name = "openai"

    def __init__(self, config: ChatAgentConfig) -> None:
        self.config = config
        self.messages: list[dict] = []
        self.tools: list[dict] = []
        self._pending_call_ids: list[str] = []

    # -- the Agent contract ---------------------------------------------------------------------

    def reset(self, observation: str, info: dict) -> None:
        """Start the conversation: system prompt and the task statement."""
        cfg = self.config
        default = NATIVE_SYSTEM_PROMPT if cfg.tool_mode == "native" else TEXT_SYSTEM_PROMPT
        self.tools = list(info.get("tools") or []) if cfg.tool_mode == "native" else []
        self.messages = [
            {"role": "system", "content": cfg.system_prompt or default},
            {"role": "user", "content": observation},
        ]
        self._pending_call_ids = []

    def act(self) -> AgentReply:
        """Ask the model for the next reply and turn it into an action."""
        body = {
            "model": self.config.model,
            "messages": self.messages,
            "temperature": self.config.temperature,
            **self.config.extra_body,
        }
        if self.config.max_tokens is not None:
            body["max_tokens"] = self.config.max_tokens
        if self.tools:
            body["tools"] = self.tools
            body["tool_choice"] = "auto"
        start = time.monotonic()
        response, attempts = self._post("/chat/completions", body)
        latency = time.monotonic() - start
        message = _first_message(response)
        usage = {k: int(v) for k, v in (response.get("usage") or {}).items() if _is_int(v)}
        tool_calls = message.get("tool_calls") or []
        content = message.get("content")
        if isinstance(content, list):  # content parts: keep the text
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        assistant = {"role": "assistant", "content": content or ""}
        if tool_calls:
            assistant["tool_calls"] = tool_calls
        self.messages.append(assistant)
        self._pending_call_ids = [c.get("id") for c in tool_calls if isinstance(c, dict)]
        action = assistant if tool_calls else (content or "")
        return AgentReply(
            action=action,
            message=assistant,
            usage=usage,
            latency_s=latency,
            attempts=attempts,
        )

    def observe(self, observation: str, info: dict) -> None:
        """Answer each tool call with its tool message; plain replies get a user message."""
        if not self._pending_call_ids:
            self.messages.append({"role": "user", "content": observation})
            return
        by_id = {m.get("tool_call_id"): m for m in info.get("messages") or []}
        answered = False
        for call_id in self._pending_call_ids:
            tool_message = by_id.get(call_id)
            if tool_message is not None:
                content = tool_message["content"]
                answered = True
            else:
                # Not run (malformed, or after a call that ended the turn): show the env's
                # whole answer, which says what was wrong.
                content = observation
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        if answered and info.get("parse_errors"):
            self.messages.append({"role": "user", "content": observation})
        self._pending_call_ids = []

    def describe(self) -> dict:
        """Model, endpoint and tool mode (never the API key)."""
        cfg = self.config
        return {
            "agent": self.name,
            "model": cfg.model,
            "base_url": cfg.resolved_base_url,
            "tool_mode": cfg.tool_mode,
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens,
        }

    # -- HTTP -------------------------------------------------------------------------------------

    def _post(self, path: str, body: dict) -> tuple[dict, int]:
        """POST JSON with retries; return the decoded answer and the number of attempts."""
        cfg = self.config
        url = cfg.resolved_base_url + path
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(cfg.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps(body).encode()
        last_error = ""
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                time.sleep(cfg.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=cfg.timeout_s) as answer:
                    payload = answer.read()
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:1000]
                last_error = f"HTTP {exc.code} from {url}: {detail}"
                if exc.code in RETRY_STATUS:
                    logger.warning("%s (attempt %d)", last_error, attempt + 1)
                    continue
                raise AgentError(last_error) from exc
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last_error = f"request to {url} failed: {reason}"
                logger.warning("%s (attempt %d)", last_error, attempt + 1)
                continue
            try:
                return json.loads(payload), attempt + 1
            except ValueError:
                last_error = f"{url} answered with non-JSON: {payload[:200]!r}"
                logger.warning("%s (attempt %d)", last_error, attempt + 1)
                continue
        raise AgentError(f"giving up after {cfg.max_retries + 1} attempts: {last_error}")


def _first_message(response: dict) -> dict:
    choices = response.get("choices") if isinstance(response, dict) else None
    if not choices or not isinstance(choices[0], dict) or "message" not in choices[0]:
        error = response.get("error") if isinstance(response, dict) else None
        detail = f"{error or response!r}"[:500]
        raise AgentError(f"the server's answer has no choices[0].message: {detail}")
    message = choices[0]["message"]
    if not isinstance(message, dict):
        raise AgentError("choices[0].message is not an object")
    return message


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
