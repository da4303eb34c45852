"""Tests for cuda_gym.actions: turning agent actions into tool calls."""

from __future__ import annotations

import json
import random
import time
from types import SimpleNamespace

import pytest

from cuda_gym.actions import (
    FORMAT_HELP,
    MAX_ERRORS,
    MAX_TOOL_CALLS,
    NO_TOOL_CALL_MESSAGE,
    ParsedAction,
    ToolCall,
    parse_action,
)

CUDA_SOURCE = r"""#include <cuda_runtime.h>
// "quotes", 'single', a backslash \ and \n escapes, </param and </para meter
__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { c[i] = a[i] + b[i]; }
    printf("{\"i\": %d}\n", i);  /* <tool_call> and </function> in a comment */
}
"""

EXPECTED_TYPE_ERROR = (
    "expected a string or a tool call (a dict like "
    '{"name": ..., "arguments": {...}}, an OpenAI tool call or assistant message, '
    "or a list of tool calls)"
)


def xml_call(name: str, **params: str) -> str:
    """Render a Qwen3-Coder style tool call."""
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def only_call(parsed: ParsedAction) -> ToolCall:
    """Return the single call of a valid action."""
    assert parsed.errors == ()
    assert len(parsed.calls) == 1
    return parsed.calls[0]


# --- Hermes / Qwen JSON blocks -----------------------------------------------------------


def test_json_block_with_text_around() -> None:
    """A JSON block is parsed and the text outside it is kept."""
    action = (
        "I will run the tests.\n"
        '<tool_call>\n{"name": "run", "arguments": {"cmd": "pytest -q", "timeout": 30}}\n'
        "</tool_call>\nDone."
    )
    assert parse_action(action) == ParsedAction(
        calls=(ToolCall("run", {"cmd": "pytest -q", "timeout": 30}),),
        errors=(),
        text="I will run the tests.\n\nDone.",
    )


@pytest.mark.parametrize(
    "block",
    [
        '<tool_call>{"name": "run", "arguments": {"cmd": "ls"}}</tool_call>',
        '<tool_call>\n\n  {"name": "run", "arguments": {"cmd": "ls"}}  \n\t</tool_call>',
        '<tool_call>{"name": " run ", "arguments": {"cmd": "ls"}}</tool_call>',
        '<tool_call>{"name": "run", "arguments": "{\\"cmd\\": \\"ls\\"}"}</tool_call>',
        '<tool_call>{"name": "run", "parameters": {"cmd": "ls"}}</tool_call>',
        '<tool_call>{"name": "run", "parameters": "{\\"cmd\\": \\"ls\\"}"}</tool_call>',
        '<tool_call>{"name": "run", "arguments": {"cmd": "ls"}}',
        '<tool_call>\n{"name": "run", "arguments": {"cmd": "ls"}}\n',
        '<tool_call>{"id": "c1", "type": "function", '
        '"function": {"name": "run", "arguments": "{\\"cmd\\": \\"ls\\"}"}}</tool_call>',
    ],
    ids=[
        "plain",
        "whitespace",
        "padded-name",
        "json-string-arguments",
        "parameters-alias",
        "parameters-json-string",
        "missing-close",
        "missing-close-newlines",
        "openai-shape",
    ],
)
def test_json_block_variants(block: str) -> None:
    """Accepted spellings of one JSON tool call all give the same call."""
    call = only_call(parse_action(block))
    assert (call.name, call.arguments) == ("run", {"cmd": "ls"})


def test_json_block_without_arguments() -> None:
    """A call without arguments gets an empty dict."""
    parsed = parse_action('<tool_call>{"name": "list_files"}</tool_call>')
    assert parsed.calls == (ToolCall("list_files", {}),)
    assert parsed.is_valid


def test_json_nested_arguments_and_literal_newlines() -> None:
    """Nested values are kept and raw newlines inside JSON strings are tolerated."""
    action = '<tool_call>{"name": "w", "arguments": {"c": "a\nb", "o": {"k": [1, 2.5, null]}}}'
    assert only_call(parse_action(action)).arguments == {"c": "a\nb", "o": {"k": [1, 2.5, None]}}


def test_json_string_may_contain_tool_call_tags() -> None:
    """Tags inside JSON strings neither end the block nor start a new one."""
    content = 'x = "</tool_call>"\ny = "<tool_call>{}</tool_call>"\n'
    action = (
        "<tool_call>"
        + json.dumps({"name": "write_file", "arguments": {"path": "t.py", "content": content}})
        + "</tool_call> after"
    )
    assert parse_action(action) == ParsedAction(
        calls=(ToolCall("write_file", {"path": "t.py", "content": content}),),
        errors=(),
        text="after",
    )


def test_bad_json_in_second_block_names_block_and_position() -> None:
    """Bad JSON gives an error naming the block and json's line and column."""
    action = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
        '<tool_call>\n{"name": "b",\n "arguments": {"x": 1}\n</tool_call>\n'
        '<tool_call>{"name": "c", "arguments": {}}</tool_call>'
    )
    parsed = parse_action(action)
    assert parsed.calls == (ToolCall("a", {}), ToolCall("c", {}))
    assert parsed.errors == (
        "Tool call block 2: invalid JSON: Expecting ',' delimiter: line 3 column 1 (char 37).",
    )
    assert not parsed.is_valid


@pytest.mark.parametrize(
    ("action", "error"),
    [
        ("<tool_call></tool_call>", "Tool call block 1: the block is empty."),
        ("<tool_call>\n  ", "Tool call block 1: the block is empty."),
        (
            '<tool_call>[{"name": "a"}]</tool_call>',
            "Tool call block 1: expected a JSON object or <function=NAME> after <tool_call>, "
            'got \'[{"name": "a"}]</tool_call>\'.',
        ),
        (
            '<tool_call>{"name": "a"}} </tool_call>',
            "Tool call block 1: unexpected text '} </tool_call>' after the JSON object; "
            "expected </tool_call>.",
        ),
        (
            '<tool_call>{"arguments": {}}</tool_call>',
            "Tool call block 1: the tool name must be a non-empty string, got None.",
        ),
        (
            '<tool_call>{"name": "  ", "arguments": {}}</tool_call>',
            "Tool call block 1: the tool name must be a non-empty string, got '  '.",
        ),
        (
            '<tool_call>{"name": 7}</tool_call>',
            "Tool call block 1: the tool name must be a non-empty string, got 7.",
        ),
        (
            '<tool_call>{"name": "a", "arguments": "[1, 2]"}</tool_call>',
            "Tool call block 1: the arguments must be a JSON object, got a JSON array.",
        ),
        (
            '<tool_call>{"name": "a", "arguments": "{\'x\': 1}"}</tool_call>',
            "Tool call block 1: the arguments are not valid JSON: Expecting property name "
            "enclosed in double quotes: line 1 column 2 (char 1).",
        ),
        (
            '<tool_call>{"name": "a", "arguments": 5}</tool_call>',
            "Tool call block 1: the arguments must be a JSON object or a JSON-encoded string, "
            "got int.",
        ),
        (
            '<tool_call>{"name": "a", "arguments": {}, "parameters": {}}</tool_call>',
            "Tool call block 1: give either 'arguments' or 'parameters', not both.",
        ),
        (
            '<tool_call>{"name": "a", "arguments": {"x": "unterminated}</tool_call>',
            "Tool call block 1: invalid JSON: Unterminated string starting at: "
            "line 1 column 34 (char 33).",
        ),
    ],
    ids=[
        "empty",
        "empty-unclosed",
        "array",
        "trailing-brace",
        "no-name",
        "blank-name",
        "int-name",
        "arguments-array",
        "arguments-bad-json",
        "arguments-int",
        "both-aliases",
        "unterminated-string",
    ],
)
def test_malformed_json_blocks(action: str, error: str) -> None:
    """Each malformed JSON block gives one exact error and no call."""
    assert parse_action(action) == ParsedAction(calls=(), errors=(error,), text="")


def test_deeply_nested_json_does_not_crash() -> None:
    """JSON nested past the recursion limit is an error, not an exception."""
    parsed = parse_action('<tool_call>{"name": "a", "arguments": ' + "[" * 100_000)
    assert parsed.calls == ()
    assert len(parsed.errors) == 1
    assert parsed.errors[0].startswith("Tool call block 1: invalid JSON")


# --- XML-parameter (Qwen3-Coder) blocks --------------------------------------------------


def test_qwen3_coder_block_with_cuda_source() -> None:
    """Parameter values are raw text: braces, quotes, backslashes and `</param` survive."""
    action = "Writing the kernel.\n" + xml_call("write_file", path="kernel.cu", content=CUDA_SOURCE)
    assert parse_action(action) == ParsedAction(
        calls=(ToolCall("write_file", {"path": "kernel.cu", "content": CUDA_SOURCE}),),
        errors=(),
        text="Writing the kernel.",
    )


def test_bare_function_block() -> None:
    """The XML form is also accepted without the <tool_call> wrapper."""
    action = "a <function=run><parameter=cmd>nvcc -O3 k.cu</parameter></function> b"
    assert parse_action(action) == ParsedAction(
        calls=(ToolCall("run", {"cmd": "nvcc -O3 k.cu"}),), errors=(), text="a  b"
    )


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("\nx\n", "x"),
        ("x", "x"),
        ("\n\nx\n\n", "\nx\n"),
        ("  x  ", "  x  "),
        ("\n  indented\n\n", "  indented\n"),
        ("\r\nwindows\r\n", "windows"),
        ("\n", ""),
        ("", ""),
        ("\n42\n", "42"),
        ("\ntrue\n", "true"),
    ],
)
def test_parameter_value_strips_exactly_one_newline(raw: str, value: str) -> None:
    """One leading and one trailing newline are removed and values stay strings."""
    action = f"<tool_call><function=f><parameter=v>{raw}</parameter></function></tool_call>"
    assert only_call(parse_action(action)).arguments == {"v": value}


@pytest.mark.parametrize(
    "action",
    [
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>",
        "<function=f>\n<parameter=a>\n1\n</parameter>\n</function>",
    ],
    ids=["complete", "no-close", "no-function-close", "only-tool-call-close", "bare"],
)
def test_xml_tolerated_missing_closers(action: str) -> None:
    """Missing </tool_call> (and </function> inside a block) at the end are tolerated."""
    assert parse_action(action) == ParsedAction(
        calls=(ToolCall("f", {"a": "1"}),), errors=(), text=""
    )


def test_function_without_parameters_and_several_per_block() -> None:
    """A block may hold several functions; a function may have no parameters."""
    action = (
        "<tool_call>\n<function=list_files>\n</function>\n"
        "<function=read_file>\n<parameter=path>\na.cu\n</parameter>\n</function>\n</tool_call>"
    )
    assert parse_action(action).calls == (
        ToolCall("list_files", {}),
        ToolCall("read_file", {"path": "a.cu"}),
    )


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (
            "<tool_call><function=f><parameter=a>\n1\n</function></tool_call>",
            "Tool call block 1: parameter 'a' of function 'f' is missing its closing "
            "</parameter> tag.",
        ),
        (
            "<tool_call><function=f><parameter=a>1</parameter><parameter=a>2</parameter>"
            "</function></tool_call>",
            "Tool call block 1: parameter 'a' of function 'f' is given twice.",
        ),
        (
            "<function=f><parameter=a>1</parameter>",
            "Tool call block 1: function 'f' is missing its closing </function> tag.",
        ),
        (
            "<tool_call><function=><parameter=a>1</parameter></function></tool_call>",
            "Tool call block 1: invalid function name ''.",
        ),
        (
            "<tool_call><function=f x><parameter=a>1</parameter></function></tool_call>",
            "Tool call block 1: invalid function name 'f x'.",
        ),
        (
            "<tool_call><function=f>\nstray text\n</function></tool_call>",
            "Tool call block 1: unexpected text 'stray text\\n</function></tool_call>' in "
            "function 'f'; expected <parameter=KEY> or </function>.",
        ),
        (
            "<tool_call><function=f" + "x" * 300,
            "Tool call block 1: the <function=...> tag is not closed by '>'.",
        ),
        (
            "<tool_call><function=f><parameter=>1</parameter></function></tool_call>",
            "Tool call block 1: invalid parameter name ''.",
        ),
        (
            "<tool_call><function=f></function> junk</tool_call>",
            "Tool call block 1: unexpected text 'junk</tool_call>' after </function>; "
            "expected </tool_call>.",
        ),
    ],
    ids=[
        "missing-parameter-close",
        "duplicate-parameter",
        "bare-missing-function-close",
        "empty-name",
        "space-in-name",
        "stray-text",
        "unclosed-tag",
        "empty-parameter-name",
        "junk-after-function",
    ],
)
def test_malformed_xml_blocks(action: str, error: str) -> None:
    """Each malformed XML block gives one exact error and no call."""
    parsed = parse_action(action)
    assert parsed.calls == ()
    assert parsed.errors == (error,)


def test_malformed_block_does_not_swallow_the_next_one() -> None:
    """After a malformed block, scanning resumes at the next block."""
    action = (
        "Use the <function=NAME> syntax, like this:\n"
        '<tool_call>{"name": "run", "arguments": {"cmd": "ls"}}</tool_call>'
    )
    parsed = parse_action(action)
    assert parsed.calls == (ToolCall("run", {"cmd": "ls"}),)
    assert parsed.errors == (
        'Tool call block 1: unexpected text \'syntax, like this:\\n<tool_call>{"name": "\'... in '
        "function 'NAME'; expected <parameter=KEY> or </function>.",
    )


# --- mixed text ----------------------------------------------------------------------------


def test_several_calls_in_order_of_appearance() -> None:
    """JSON, wrapped XML and bare XML calls come back in the order they appear."""
    action = (
        "First\n"
        '<tool_call>{"name": "a", "arguments": {"n": 1}}</tool_call>\n'
        "then\n"
        + xml_call("b", n="2")
        + "\n<function=c><parameter=n>3</parameter></function>\nlast"
    )
    assert parse_action(action) == ParsedAction(
        calls=(ToolCall("a", {"n": 1}), ToolCall("b", {"n": "2"}), ToolCall("c", {"n": "3"})),
        errors=(),
        text="First\n\nthen\n\n\nlast",
    )


@pytest.mark.parametrize(
    "text",
    ["", "   \n", "I think the kernel is done.", '{"name": "run"}', "<tool_cal>x</tool_cal>"],
)
def test_no_tool_call(text: str) -> None:
    """Text without any tool-call block gives the exact 'no tool call' error."""
    assert parse_action(text) == ParsedAction(
        calls=(), errors=(NO_TOOL_CALL_MESSAGE,), text=text.strip()
    )
    assert NO_TOOL_CALL_MESSAGE == "No tool call found in the action."


def test_too_long_input() -> None:
    """Text over max_chars is rejected without calls."""
    action = '<tool_call>{"name": "a"}</tool_call>'
    assert parse_action(action, max_chars=len(action)).calls == (ToolCall("a", {}),)
    assert parse_action(action, max_chars=len(action) - 1) == ParsedAction(
        calls=(),
        errors=(f"The action is too long ({len(action)} characters; the limit is 35).",),
        text="",
    )
    huge = "x" * 1_000_001
    assert parse_action(huge).errors == (
        "The action is too long (1000001 characters; the limit is 1000000).",
    )


def test_too_many_calls_keeps_the_first_sixteen() -> None:
    """More than MAX_TOOL_CALLS calls keeps the first ones and adds an error."""
    action = "".join(f'<tool_call>{{"name": "t{i}"}}</tool_call>' for i in range(20))
    parsed = parse_action(action)
    assert MAX_TOOL_CALLS == 16
    assert [call.name for call in parsed.calls] == [f"t{i}" for i in range(16)]
    assert parsed.errors == (
        "Too many tool calls (20): at most 16 are allowed per action, so only the first 16 "
        "were kept.",
    )


def test_errors_are_capped() -> None:
    """Many malformed blocks give MAX_ERRORS messages, the last one a summary."""
    parsed = parse_action("<tool_call></tool_call>" * 40)
    assert len(parsed.errors) == MAX_ERRORS
    assert parsed.errors[0] == "Tool call block 1: the block is empty."
    assert parsed.errors[-1] == "... and 25 more errors."


def test_nul_bytes_and_lone_surrogates_are_kept() -> None:
    """NUL bytes and unpaired surrogates neither crash nor get altered."""
    value = "a\x00b\ud800c\udfff"
    action = f"{value}<tool_call><function=f><parameter=v>{value}</parameter></function>"
    assert parse_action(action) == ParsedAction(
        calls=(ToolCall("f", {"v": value}),), errors=(), text=value
    )


def test_random_bytes_decoded_as_latin1() -> None:
    """Random binary data decoded as latin-1 is plain text without calls."""
    rng = random.Random(0)
    for _ in range(50):
        text = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2000))).decode("latin-1")
        assert parse_action(text) == ParsedAction(
            calls=(), errors=(NO_TOOL_CALL_MESSAGE,), text=text.strip()
        )


_FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    "</param",
    "f>",
    "x>",
    ">",
    "<",
    "{",
    "}",
    "[",
    "]",
    '"',
    '"name"',
    '"arguments"',
    '"parameters"',
    '{"name": "t", "arguments": {}}',
    ":",
    ",",
    "\\",
    "\n",
    " ",
    "\x00",
    "\ud800",
    "null",
    "1",
    "é",
]


def test_random_strings_never_raise() -> None:
    """Random mixes of tags and JSON pieces always give a consistent ParsedAction."""
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randrange(0, 40)))
        parsed = parse_action(text)
        assert isinstance(parsed, ParsedAction)
        assert "Internal error while parsing the action." not in parsed.errors
        assert parsed.calls or parsed.errors
        assert len(parsed.calls) <= MAX_TOOL_CALLS
        assert len(parsed.errors) <= MAX_ERRORS + 1
        assert parsed.is_valid == (bool(parsed.calls) and not parsed.errors)
        for call in parsed.calls:
            assert isinstance(call.name, str) and call.name == call.name.strip() and call.name
            assert isinstance(call.arguments, dict)
            assert all(isinstance(key, str) for key in call.arguments)


def test_random_xml_values_round_trip() -> None:
    """Random parameter values (anything but </parameter>) come back unchanged."""
    rng = random.Random(0)
    alphabet = ["<", ">", "/", "{", "}", '"', "'", "\\", "\n", " ", "a", "Z", "</param", "é"]
    for _ in range(300):
        values = {
            f"p{i}": "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
            for i in range(rng.randrange(1, 4))
        }
        parsed = parse_action("prefix " + xml_call("tool", **values) + " suffix")
        assert parsed == ParsedAction(
            calls=(ToolCall("tool", values),), errors=(), text="prefix  suffix"
        )


@pytest.mark.parametrize(
    ("unit", "first_error"),
    [
        (
            '<tool_call>{"a": "x</tool_call>',
            "Tool call block 1: invalid JSON: Unterminated string starting at: "
            "line 1 column 7 (char 6).",
        ),
        (
            "<tool_call>{",
            "Tool call block 1: invalid JSON: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1).",
        ),
        (
            "<function=a><parameter=b>x</function>",
            "Tool call block 1: parameter 'b' of function 'a' is missing its closing "
            "</parameter> tag.",
        ),
        ("<function=", "Tool call block 1: the <function=...> tag is not closed by '>'."),
    ],
    ids=["strings-with-close-tags", "openers", "unclosed-parameters", "unclosed-tags"],
)
def test_pathological_text_is_scanned_in_linear_time(unit: str, first_error: str) -> None:
    """A megabyte of repeated malformed blocks is parsed quickly, with capped errors."""
    action = (unit * (1_000_000 // len(unit) + 1))[:1_000_000]
    started = time.process_time()  # CPU time: a loaded machine stretches wall time only
    parsed = parse_action(action)
    assert time.process_time() - started < 5.0
    assert parsed.calls == ()
    assert len(parsed.errors) == MAX_ERRORS
    assert parsed.errors[0] == first_error


# --- parsed and OpenAI-style dicts ---------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ({"name": "run", "arguments": {"cmd": "ls"}}, ToolCall("run", {"cmd": "ls"})),
        ({"name": "run", "arguments": '{"cmd": "ls"}'}, ToolCall("run", {"cmd": "ls"})),
        ({"name": "run", "parameters": {"cmd": "ls"}}, ToolCall("run", {"cmd": "ls"})),
        ({"name": "run", "arguments": ""}, ToolCall("run", {})),
        ({"name": "run"}, ToolCall("run", {})),
        ({"name": "run", "arguments": {}, "id": "call_1"}, ToolCall("run", {}, "call_1")),
        (
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "run", "arguments": '{"cmd": "ls"}'},
            },
            ToolCall("run", {"cmd": "ls"}, "call_abc"),
        ),
        (
            {"function": {"name": "run", "arguments": {"cmd": "ls"}}},
            ToolCall("run", {"cmd": "ls"}),
        ),
    ],
    ids=[
        "parsed",
        "json-string",
        "parameters",
        "empty-string",
        "no-arguments",
        "with-id",
        "openai",
        "openai-no-id-dict-args",
    ],
)
def test_dict_tool_calls(action: dict, expected: ToolCall) -> None:
    """Parsed and OpenAI tool-call dicts become one call."""
    assert parse_action(action) == ParsedAction(calls=(expected,), errors=(), text="")


def test_dict_arguments_are_copied() -> None:
    """The call's arguments are a copy, not the caller's dict."""
    arguments = {"cmd": "ls"}
    call = only_call(parse_action({"name": "run", "arguments": arguments}))
    arguments["cmd"] = "rm"
    assert call.arguments == {"cmd": "ls"}


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (
            {"name": "", "arguments": {}},
            "Invalid tool call: the tool name must be a non-empty string, got ''.",
        ),
        (
            {"name": "run", "arguments": "[1]"},
            "Invalid tool call: the arguments must be a JSON object, got a JSON array.",
        ),
        (
            {"name": "run", "arguments": '"{}"'},
            "Invalid tool call: the arguments must be a JSON object, got a JSON string.",
        ),
        (
            {"name": "run", "arguments": "{"},
            "Invalid tool call: the arguments are not valid "
            "JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1).",
        ),
        (
            {"name": "run", "arguments": {1: "x"}},
            "Invalid tool call: argument names must be strings, got 1.",
        ),
        (
            {"name": "run", "arguments": [1]},
            "Invalid tool call: the arguments must be a JSON "
            "object or a JSON-encoded string, got list.",
        ),
        (
            {"type": "custom", "function": {"name": "run", "arguments": "{}"}},
            "Invalid tool call: unsupported tool call type 'custom'; expected 'function'.",
        ),
        (
            {"type": "function", "function": {"arguments": "{}"}},
            "Invalid tool call: 'function' must be an object with a 'name' and 'arguments'.",
        ),
        (
            {"foo": 1, "bar": 2},
            f"Unsupported action of type dict with keys ['bar', 'foo']: {EXPECTED_TYPE_ERROR}.",
        ),
    ],
    ids=[
        "empty-name",
        "array",
        "string",
        "bad-json",
        "int-key",
        "list",
        "wrong-type",
        "function-no-name",
        "unknown-dict",
    ],
)
def test_malformed_dicts(action: dict, error: str) -> None:
    """Each malformed dict gives one exact error and no call."""
    assert parse_action(action) == ParsedAction(calls=(), errors=(error,), text="")


def test_arguments_string_over_max_chars() -> None:
    """JSON-encoded arguments longer than max_chars are rejected."""
    parsed = parse_action({"name": "run", "arguments": '{"a": "' + "x" * 100 + '"}'}, 50)
    assert parsed.errors == (
        "Invalid tool call: the arguments is too long (109 characters; the limit is 50).",
    )


def test_assistant_message_with_tool_calls() -> None:
    """An assistant message's tool_calls are parsed and its content kept as text."""
    message = {
        "role": "assistant",
        "content": "  Let me check.  ",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "b", "arguments": '{"x": 2}'}},
        ],
    }
    assert parse_action(message) == ParsedAction(
        calls=(ToolCall("a", {}, "c1"), ToolCall("b", {"x": 2}, "c2")),
        errors=(),
        text="Let me check.",
    )


@pytest.mark.parametrize("tool_calls", [None, [], "missing"])
def test_assistant_message_without_tool_calls_parses_content(tool_calls: object) -> None:
    """Without tool_calls, an assistant message's content is parsed as text."""
    message: dict = {"role": "assistant", "content": "ok " + xml_call("run", cmd="ls")}
    if tool_calls != "missing":
        message["tool_calls"] = tool_calls
    assert parse_action(message) == ParsedAction(
        calls=(ToolCall("run", {"cmd": "ls"}),), errors=(), text="ok"
    )


def test_assistant_message_content_parts() -> None:
    """A content given as a list of text parts is joined and parsed."""
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading."},
            {"type": "text", "text": '<tool_call>{"name": "read_file"}</tool_call>'},
        ],
    }
    assert parse_action(message) == ParsedAction(
        calls=(ToolCall("read_file", {}),), errors=(), text="Reading."
    )


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": None},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "assistant", "content": "just thinking"},
    ],
)
def test_assistant_message_without_any_call(message: dict) -> None:
    """A message with neither tool_calls nor a call in its content has no calls."""
    parsed = parse_action(message)
    assert parsed.calls == ()
    assert parsed.errors == (NO_TOOL_CALL_MESSAGE,)


def test_assistant_message_with_non_list_tool_calls() -> None:
    """tool_calls of the wrong type is an error."""
    parsed = parse_action({"role": "assistant", "tool_calls": {"name": "a"}})
    assert parsed.errors == (
        "The message's tool_calls must be a list, got dict with keys ['name'].",
    )


@pytest.mark.parametrize("container", [list, tuple])
def test_list_of_tool_calls_reports_errors_per_element(container: type) -> None:
    """Each element of a list is parsed; errors name the element."""
    action = container(
        [
            {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{bad"}},
            "not a call",
            {"name": "c", "arguments": {"k": "v"}},
        ]
    )
    assert parse_action(action) == ParsedAction(
        calls=(ToolCall("a", {}, "c1"), ToolCall("c", {"k": "v"})),
        errors=(
            "Tool call 2: the arguments are not valid JSON: Expecting property name enclosed "
            "in double quotes: line 1 column 2 (char 1).",
            f"Tool call 3: unsupported element of type str; {EXPECTED_TYPE_ERROR}.",
        ),
        text="",
    )


def test_empty_list_has_no_tool_call() -> None:
    """An empty list of tool calls gives the 'no tool call' error."""
    assert parse_action([]) == ParsedAction(calls=(), errors=(NO_TOOL_CALL_MESSAGE,), text="")


def test_list_over_the_call_limit() -> None:
    """A list with too many calls keeps the first MAX_TOOL_CALLS."""
    parsed = parse_action([{"name": f"t{i}"} for i in range(17)])
    assert len(parsed.calls) == MAX_TOOL_CALLS
    assert parsed.calls[-1] == ToolCall("t15", {})
    assert len(parsed.errors) == 1


# --- SDK-like objects ----------------------------------------------------------------------


def sdk_tool_call(call_id: str, name: str, arguments: str) -> SimpleNamespace:
    """Build an object shaped like openai's ChatCompletionMessageToolCall."""
    function = SimpleNamespace(name=name, arguments=arguments)
    return SimpleNamespace(id=call_id, type="function", function=function)


def test_sdk_tool_call_object() -> None:
    """A tool-call object is read through its attributes."""
    parsed = parse_action(sdk_tool_call("call_9", "run", '{"cmd": "ls"}'))
    assert parsed == ParsedAction(
        calls=(ToolCall("run", {"cmd": "ls"}, "call_9"),), errors=(), text=""
    )


def test_sdk_message_object_and_list_of_objects() -> None:
    """A message object's tool_calls, or a list of tool-call objects, are parsed."""
    calls = [sdk_tool_call("c1", "a", "{}"), sdk_tool_call("c2", "b", '{"n": 1}')]
    message = SimpleNamespace(role="assistant", content=None, tool_calls=calls)
    expected = (ToolCall("a", {}, "c1"), ToolCall("b", {"n": 1}, "c2"))
    assert parse_action(message) == ParsedAction(calls=expected, errors=(), text="")
    assert parse_action(calls) == ParsedAction(calls=expected, errors=(), text="")


def test_sdk_message_object_without_tool_calls() -> None:
    """A message object without tool_calls has its content parsed as text."""
    message = SimpleNamespace(
        role="assistant", content='<tool_call>{"name": "a"}</tool_call>', tool_calls=None
    )
    assert parse_action(message).calls == (ToolCall("a", {}),)


def test_responses_api_like_object() -> None:
    """An object with name, arguments and call_id attributes is a call."""
    item = SimpleNamespace(
        type="function_call", id="fc_1", call_id="call_1", name="run", arguments="{}"
    )
    assert parse_action(item).calls == (ToolCall("run", {}, "call_1"),)


def test_object_with_failing_attributes() -> None:
    """Attributes that raise are treated as missing."""

    class Broken:
        """An object whose every attribute access fails."""

        def __getattr__(self, name: str) -> object:
            raise RuntimeError(name)

    parsed = parse_action(Broken())
    assert parsed.calls == ()
    assert parsed.errors == (f"Unsupported action of type Broken: {EXPECTED_TYPE_ERROR}.",)


@pytest.mark.parametrize(
    ("action", "type_name"),
    [
        (None, "NoneType"),
        (42, "int"),
        (3.5, "float"),
        (True, "bool"),
        (b"<tool_call>{}</tool_call>", "bytes"),
        (bytearray(b"x"), "bytearray"),
        ({1, 2}, "set"),
        (object(), "object"),
    ],
)
def test_unsupported_types(action: object, type_name: str) -> None:
    """Unsupported action types give an error naming the type."""
    assert parse_action(action) == ParsedAction(
        calls=(),
        errors=(f"Unsupported action of type {type_name}: {EXPECTED_TYPE_ERROR}.",),
        text="",
    )


# --- ParsedAction and FORMAT_HELP ----------------------------------------------------------


@pytest.mark.parametrize(
    ("calls", "errors", "valid"),
    [
        ((ToolCall("a", {}),), (), True),
        ((ToolCall("a", {}),), ("bad",), False),
        ((), (), False),
        ((), ("bad",), False),
    ],
)
def test_is_valid(calls: tuple, errors: tuple, valid: bool) -> None:
    """An action is valid when it has calls and no errors."""
    assert ParsedAction(calls=calls, errors=errors, text="").is_valid is valid


def test_format_help_examples_parse() -> None:
    """Both examples in FORMAT_HELP are accepted by the parser."""
    json_start = FORMAT_HELP.index("<tool_call>\n{")
    xml_start = FORMAT_HELP.index("<tool_call>\n<function=")
    json_example = FORMAT_HELP[json_start : FORMAT_HELP.index("</tool_call>", json_start) + 12]
    xml_example = FORMAT_HELP[xml_start:]
    assert parse_action(json_example).calls == (
        ToolCall("write_file", {"path": "model_new.py", "content": "import torch\n"}),
    )
    assert parse_action(xml_example) == ParsedAction(
        calls=(ToolCall("write_file", {"path": "model_new.py", "content": "import torch"}),),
        errors=(),
        text="",
    )
