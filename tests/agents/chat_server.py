"""A local OpenAI-compatible chat-completions server for tests, answering from a script.

`respond(body)` gets each request's JSON and returns (status, payload); the server records
every request. It runs in a daemon thread on 127.0.0.1 and stops when the `with` block ends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}


def completion(content: str | None = None, tool_calls: list | None = None) -> dict:
    """A chat.completion object with one choice and USAGE."""
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": dict(USAGE),
    }


def tool_call(call_id: str, name: str, **arguments) -> dict:
    """An OpenAI tool call with JSON-encoded arguments."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def conversation_errors(messages: list[dict]) -> list[str]:
    """What a strict server would refuse: tool calls without their tool messages, and so on."""
    errors = []
    if not messages or messages[0].get("role") != "system":
        errors.append("the first message must be the system prompt")
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            answers = messages[i + 1 : i + 1 + len(ids)]
            got = [a.get("tool_call_id") for a in answers if a.get("role") == "tool"]
            if i + 1 < len(messages) and got != ids:
                errors.append(f"tool calls {ids} answered by {got}")
    return errors


class ChatServer:
    """`with ChatServer(respond) as server:` serves at `server.base_url`."""

    def __init__(self, respond: Callable[[dict], tuple[int, dict]]) -> None:
        self.respond = respond
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                with outer.lock:
                    outer.requests.append(
                        {"path": self.path, "auth": self.headers.get("Authorization"), **body}
                    )
                if self.path != "/v1/chat/completions":
                    status, payload = 404, {"error": {"message": f"no route {self.path}"}}
                else:
                    status, payload = outer.respond(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
