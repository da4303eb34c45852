"""The OpenAI-compatible chat agent against a local server: requests, retries, usage, modes."""

import json

import pytest

from cuda_gym.agents import AgentError, ChatAgentConfig, OpenAIChatAgent
from cuda_gym.errors import ConfigError
from tests.agents.chat_server import ChatServer, completion, conversation_errors, tool_call

TOOLS = [{"type": "function", "function": {"name": "submit", "parameters": {}}}]


def agent_for(server, **kw):
    cfg = ChatAgentConfig(
        model="test-model", base_url=server.base_url, backoff_s=0.01, timeout_s=5, **kw
    )
    return OpenAIChatAgent(cfg)


def test_native_mode_sends_tools_and_plays_tool_calls(monkeypatch):
    monkeypatch.setenv("TEST_KEY", "sk-test")
    with ChatServer(lambda body: (200, completion(tool_calls=[tool_call("c1", "submit")]))) as s:
        agent = agent_for(s, api_key_env="TEST_KEY")
        agent.reset("the task", {"tools": TOOLS})
        reply = agent.act()
    request = s.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] == "Bearer sk-test"
    assert request["model"] == "test-model" and request["tools"] == TOOLS
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][1]["content"] == "the task"
    assert reply.action["tool_calls"][0]["id"] == "c1"
    assert reply.usage == {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    assert reply.attempts == 1


def test_tool_results_answer_each_call_by_id():
    calls = [tool_call("a", "read_file", path="model.py"), tool_call("b", "compile")]
    with ChatServer(lambda body: (200, completion(tool_calls=calls))) as s:
        agent = agent_for(s)
        agent.reset("task", {"tools": TOOLS})
        agent.act()
        info = {"messages": [{"role": "tool", "tool_call_id": "a", "content": "file text"}]}
        agent.observe("whole observation", info)
    tail = agent.messages[-2:]
    assert tail == [
        {"role": "tool", "tool_call_id": "a", "content": "file text"},
        {"role": "tool", "tool_call_id": "b", "content": "whole observation"},
    ]
    assert conversation_errors(agent.messages) == []


def test_text_mode_sends_no_tools_and_passes_the_text_on():
    text = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    with ChatServer(lambda body: (200, completion(content=text))) as s:
        agent = agent_for(s, tool_mode="text")
        agent.reset("task", {"tools": TOOLS})
        reply = agent.act()
        agent.observe("obs", {})
    assert "tools" not in s.requests[0]
    assert reply.action == text
    assert agent.messages[-1] == {"role": "user", "content": "obs"}


def test_retries_transient_failures_then_succeeds():
    answers = iter([(503, {"error": "busy"}), (429, {"error": "slow down"})])

    def respond(body):
        return next(answers, (200, completion(content="hi")))

    with ChatServer(respond) as s:
        agent = agent_for(s, max_retries=2)
        agent.reset("task", {})
        reply = agent.act()
    assert reply.attempts == 3 and len(s.requests) == 3


def test_gives_up_after_the_retries_with_the_last_error():
    with ChatServer(lambda body: (503, {"error": "down"})) as s:
        agent = agent_for(s, max_retries=1)
        agent.reset("task", {})
        with pytest.raises(AgentError, match="giving up after 2 attempts: HTTP 503"):
            agent.act()
    assert len(s.requests) == 2


def test_client_errors_are_not_retried():
    with ChatServer(lambda body: (400, {"error": {"message": "bad request"}})) as s:
        agent = agent_for(s, max_retries=3)
        agent.reset("task", {})
        with pytest.raises(AgentError, match="HTTP 400"):
            agent.act()
    assert len(s.requests) == 1


def test_an_answer_without_choices_is_an_agent_error():
    with ChatServer(lambda body: (200, {"error": {"message": "model not loaded"}})) as s:
        agent = agent_for(s, max_retries=0)
        agent.reset("task", {})
        with pytest.raises(AgentError, match="model not loaded"):
            agent.act()


def test_unreachable_server_times_out_into_an_agent_error():
    cfg = ChatAgentConfig(
        model="m", base_url="http://127.0.0.1:9/v1", max_retries=1, backoff_s=0.01, timeout_s=2
    )
    agent = OpenAIChatAgent(cfg)
    agent.reset("task", {})
    with pytest.raises(AgentError, match="request to http://127.0.0.1:9/v1/chat/completions"):
        agent.act()


def test_config_is_validated_and_the_key_never_described(monkeypatch):
    with pytest.raises(ConfigError, match="model is required"):
        ChatAgentConfig(model="")
    with pytest.raises(ConfigError, match="tool_mode"):
        ChatAgentConfig(model="m", tool_mode="json")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://example.invalid/v1/")
    agent = OpenAIChatAgent(ChatAgentConfig(model="m"))
    assert agent.describe()["base_url"] == "http://example.invalid/v1"
    assert "sk-secret" not in json.dumps(agent.describe())
