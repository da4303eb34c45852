"""Turn an agent's action (assistant text or structured tool calls) into tool calls.

The entry point is :func:`parse_action`. It accepts raw assistant text with Hermes/Qwen
``<tool_call>`` JSON blocks or Qwen3-Coder ``<function=...>`` XML blocks, parsed tool-call
dicts, OpenAI tool calls and assistant messages (as dicts or SDK objects), and lists of
those. It never raises: every malformed part becomes a human-readable message in
:attr:`ParsedAction.errors`, suitable for an error observation (see :data:`FORMAT_HELP`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

MAX_TOOL_CALLS = 16
"""The most tool calls kept from one action; later ones are dropped with an error."""

MAX_ERRORS = 16
"""The most error messages reported for one action; the rest are summarised in one line."""

NO_TOOL_CALL_MESSAGE = "No tool call found in the action."

FORMAT_HELP = """\
Call tools with either of these two formats (several calls may follow one another).

1. JSON inside <tool_call> tags:
<tool_call>
{"name": "write_file", "arguments": {"path": "model_new.py", "content": "import torch\\n"}}
</tool_call>

2. XML parameters inside <tool_call> tags (values are raw text, no escaping needed):
<tool_call>
<function=write_file>
<parameter=path>
model_new.py
</parameter>
<parameter=content>
import torch
</parameter>
</function>
</tool_call>"""
"""A short description of the accepted text formats, for error observations."""

_TOOL_CALL_OPEN = "<tool_call>"
_TOOL_CALL_CLOSE = "</tool_call>"
_FUNCTION_OPEN = "<function="
_FUNCTION_CLOSE = "</function>"
_PARAMETER_OPEN = "<parameter="
_PARAMETER_CLOSE = "</parameter>"

_MAX_TAG_NAME = 256
_PREVIEW_CHARS = 40
_EXPECTED = (
    "expected a string or a tool call (a dict like "
    '{"name": ..., "arguments": {...}}, an OpenAI tool call or assistant message, '
    "or a list of tool calls)"
)
_DECODER = json.JSONDecoder(strict=False)
_SPACE = re.compile(r"\s*")
_MISSING = object()


@dataclass(frozen=True)
class ToolCall:
    """One call of a named tool.

    Attributes:
        name: The tool's name, stripped of surrounding whitespace.
        arguments: The call's arguments. Values from the XML-parameter text format are
            always strings; the tool layer validates and coerces them.
        call_id: The OpenAI tool-call id when the action gave one, else None.
    """

    name: str
    arguments: dict[str, Any]
    call_id: str | None = None


@dataclass(frozen=True)
class ParsedAction:
    """The outcome of parsing one action.

    Attributes:
        calls: The well-formed tool calls, in order of appearance (at most
            :data:`MAX_TOOL_CALLS`).
        errors: One human-readable message per malformed part of the action.
        text: Assistant text outside tool-call blocks, stripped; for an assistant message
            with ``tool_calls`` it is the message's content, and '' for parsed calls.
    """

    calls: tuple[ToolCall, ...]
    errors: tuple[str, ...]
    text: str

    @property
    def is_valid(self) -> bool:
        """Whether the action holds at least one tool call and nothing malformed."""
        return bool(self.calls) and not self.errors


class _ParseError(Exception):
    """A malformed part of an action; its message describes the problem."""


@dataclass
class _Collector:
    """Accumulates calls, errors and text while an action is parsed."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def merge(self, other: _Collector) -> None:
        """Append everything that another collector gathered."""
        self.calls.extend(other.calls)
        self.errors.extend(other.errors)
        self.texts.extend(other.texts)

    def finish(self) -> ParsedAction:
        """Apply the per-action limits and freeze the result."""
        errors = _cap_errors(self.errors)
        calls = self.calls
        if len(calls) > MAX_TOOL_CALLS:
            errors.append(
                f"Too many tool calls ({len(calls)}): at most {MAX_TOOL_CALLS} are allowed "
                f"per action, so only the first {MAX_TOOL_CALLS} were kept."
            )
            calls = calls[:MAX_TOOL_CALLS]
        if not calls and not errors:
            errors.append(NO_TOOL_CALL_MESSAGE)
        text = "\n\n".join(t for t in self.texts if t)
        return ParsedAction(calls=tuple(calls), errors=tuple(errors), text=text)


def parse_action(action: object, max_chars: int = 1_000_000) -> ParsedAction:
    """Parse an agent's action into tool calls without ever raising.

    Args:
        action: Raw assistant text; a parsed call ``{"name": ..., "arguments": ...}``; an
            OpenAI tool call or assistant message, as a dict or an SDK-like object; or a
            list or tuple of those.
        max_chars: The longest text (or JSON-encoded arguments string) accepted.

    Returns:
        The calls found, one error message per malformed part, and the text outside the
        tool-call blocks.
    """
    try:
        collector = _parse_any(action, max_chars)
    except Exception:
        logger.exception("Unexpected failure while parsing an action.")
        return ParsedAction(calls=(), errors=("Internal error while parsing the action.",), text="")
    return collector.finish()


def _parse_any(action: object, max_chars: int) -> _Collector:
    """Dispatch on the action's type."""
    if isinstance(action, str):
        return _TextParser(action, max_chars).parse()
    collector = _Collector()
    kind = _kind(action)
    if isinstance(action, (list, tuple)):
        _parse_sequence(action, max_chars, collector)
    elif kind == "message":
        _parse_message(action, max_chars, collector)
    elif kind == "call":
        _add_call(action, "Invalid tool call", max_chars, collector)
    else:
        collector.errors.append(f"Unsupported action of type {_describe(action)}: {_EXPECTED}.")
    return collector


def _parse_sequence(items: list[Any] | tuple[Any, ...], max_chars: int, out: _Collector) -> None:
    """Parse a list of tool calls (or assistant messages), reporting errors per element."""
    for index, item in enumerate(items, start=1):
        kind = _kind(item)
        if kind == "message":
            _parse_message(item, max_chars, out)
        elif kind == "call":
            _add_call(item, f"Tool call {index}", max_chars, out)
        else:
            out.errors.append(
                f"Tool call {index}: unsupported element of type {_describe(item)}; {_EXPECTED}."
            )


def _parse_message(message: object, max_chars: int, out: _Collector) -> None:
    """Parse an assistant message: its ``tool_calls``, or else its text content."""
    content = _content_text(_get(message, "content"))
    tool_calls = _get(message, "tool_calls")
    if tool_calls is None or (isinstance(tool_calls, (list, tuple)) and not tool_calls):
        if content is not None:
            out.merge(_TextParser(content, max_chars).parse())
        return
    if not isinstance(tool_calls, (list, tuple)):
        out.errors.append(f"The message's tool_calls must be a list, got {_describe(tool_calls)}.")
        return
    for index, item in enumerate(tool_calls, start=1):
        if _kind(item) == "call":
            _add_call(item, f"Tool call {index}", max_chars, out)
        else:
            out.errors.append(f"Tool call {index}: not a tool call ({_describe(item)}).")
    if content is not None and len(content) > max_chars:
        out.errors.append(_too_long("The message content", len(content), max_chars))
    elif content:
        out.texts.append(content.strip())


def _add_call(item: object, label: str, max_chars: int, out: _Collector) -> None:
    """Add the call described by ``item``, or an error prefixed by ``label``."""
    try:
        out.calls.append(_call_from_object(item, max_chars))
    except _ParseError as exc:
        out.errors.append(f"{label}: {exc}")


def _call_from_object(item: object, max_chars: int) -> ToolCall:
    """Build a call from a parsed call or an OpenAI tool call (dict or object).

    Raises:
        _ParseError: The item is not a well-formed tool call.
    """
    function = _get(item, "function")
    source = item
    if function is not None:
        call_type = _get(item, "type")
        if call_type is not None and call_type != "function":
            raise _ParseError(
                f"unsupported tool call type {_preview(call_type)}; expected 'function'."
            )
        if _get(function, "name") is None:
            raise _ParseError("'function' must be an object with a 'name' and 'arguments'.")
        source = function
    name = _check_name(_get(source, "name"))
    arguments = _coerce_arguments(_pick_arguments(source), max_chars)
    return ToolCall(name=name, arguments=arguments, call_id=_call_id(item))


def _check_name(name: object) -> str:
    """Return the stripped tool name, or raise if it is not a non-empty string."""
    if not isinstance(name, str) or not name.strip():
        raise _ParseError(f"the tool name must be a non-empty string, got {_preview(name)}.")
    return name.strip()


def _pick_arguments(source: object) -> object:
    """Return ``arguments``, or its alias ``parameters``, of a call."""
    arguments = _get(source, "arguments")
    parameters = _get(source, "parameters")
    if arguments is not None and parameters is not None:
        raise _ParseError("give either 'arguments' or 'parameters', not both.")
    return parameters if arguments is None else arguments


def _coerce_arguments(arguments: object, max_chars: int) -> dict[str, Any]:
    """Turn a call's arguments (missing, a mapping or a JSON string) into a dict."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        return _decode_arguments(arguments, max_chars)
    if isinstance(arguments, Mapping):
        for key in arguments:
            if not isinstance(key, str):
                raise _ParseError(f"argument names must be strings, got {_preview(key)}.")
        return dict(arguments)
    raise _ParseError(
        f"the arguments must be a JSON object or a JSON-encoded string, got {_describe(arguments)}."
    )


def _decode_arguments(encoded: str, max_chars: int) -> dict[str, Any]:
    """Decode JSON-encoded arguments, which must be an object ('' means no arguments)."""
    if len(encoded) > max_chars:
        raise _ParseError(_too_long("the arguments", len(encoded), max_chars))
    if not encoded.strip():
        return {}
    try:
        value = _DECODER.decode(encoded)
    except json.JSONDecodeError as exc:
        raise _ParseError(f"the arguments are not valid JSON: {exc}.") from None
    except RecursionError:
        raise _ParseError("the arguments are not valid JSON: nested too deeply.") from None
    if not isinstance(value, dict):
        raise _ParseError(f"the arguments must be a JSON object, got a JSON {_json_type(value)}.")
    return value


def _call_id(item: object) -> str | None:
    """Return the call's id (``call_id`` first, then ``id``) when it is a non-empty string."""
    for key in ("call_id", "id"):
        value = _get(item, key)
        if isinstance(value, str) and value:
            return value
    return None


def _content_text(content: object) -> str | None:
    """Return a message's content as text: a string, or the joined text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = [_get(part, "text") for part in content]
        return "\n".join(part for part in parts if isinstance(part, str))
    return None


def _kind(item: object) -> str | None:
    """Classify a structured item as a 'call', a 'message', or None (unsupported)."""
    if isinstance(item, (str, bytes, bytearray, memoryview, int, float, complex)) or item is None:
        return None
    if _get(item, "function") is not None:
        return "call"
    if _has(item, "tool_calls") or _has(item, "content") or _get(item, "role") is not None:
        return "message"
    if _get(item, "name") is not None:
        return "call"
    return None


def _get(item: object, key: str, default: object = None) -> Any:
    """Read a key of a mapping, or else an attribute of an object, never raising."""
    try:
        if isinstance(item, Mapping):
            return item.get(key, default)
        return getattr(item, key, default)
    except Exception:
        return default


def _has(item: object, key: str) -> bool:
    """Whether a mapping has the key, or an object the attribute."""
    return _get(item, key, _MISSING) is not _MISSING


class _TextParser:
    """Scans assistant text for tool-call blocks, in order of appearance.

    Searches are memoised per needle so that scanning stays linear in the text's length,
    and decoding JSON past a ``</tool_call>`` (which a JSON string may contain) is given a
    budget for the same reason.
    """

    def __init__(self, text: str, max_chars: int) -> None:
        self._text = text
        self._max_chars = max_chars
        self._found: dict[str, tuple[int, int]] = {}
        self._json_budget = 2 * len(text)

    def parse(self) -> _Collector:
        """Return the calls, errors and outside text of the whole text."""
        out = _Collector()
        if len(self._text) > self._max_chars:
            out.errors.append(_too_long("The action", len(self._text), self._max_chars))
            return out
        outside: list[str] = []
        pos, block = 0, 0
        while (start := self._next_block(pos)) >= 0:
            outside.append(self._text[pos:start])
            block += 1
            pos = self._parse_block(start, block, out)
        outside.append(self._text[pos:])
        out.texts.append("".join(outside).strip())
        return out

    def _find(self, needle: str, pos: int) -> int:
        """Like ``str.find`` from ``pos``, memoised so that repeated searches stay cheap."""
        cached = self._found.get(needle)
        if cached is not None:
            start, hit = cached
            if start <= pos and (hit == -1 or hit >= pos):
                return hit
            if pos < start:
                earlier = self._text.find(needle, pos, start + len(needle) - 1)
                hit = hit if earlier < 0 else earlier
                self._found[needle] = (pos, hit)
                return hit
        hit = self._text.find(needle, pos)
        self._found[needle] = (pos, hit)
        return hit

    def _next_block(self, pos: int) -> int:
        """Return where the next ``<tool_call>`` or bare ``<function=`` starts, or -1."""
        hits = [self._find(_TOOL_CALL_OPEN, pos), self._find(_FUNCTION_OPEN, pos)]
        hits = [hit for hit in hits if hit >= 0]
        return min(hits) if hits else -1

    def _parse_block(self, start: int, block: int, out: _Collector) -> int:
        """Parse the block at ``start`` into ``out`` and return where scanning resumes."""
        wrapped = self._at(_TOOL_CALL_OPEN, start)
        try:
            if wrapped:
                calls, end = self._tool_call_block(start)
            else:
                call, end = self._function(start, wrapped=False)
                calls = [call]
        except _ParseError as exc:
            out.errors.append(f"Tool call block {block}: {exc}")
            return self._recover(start, wrapped)
        out.calls.extend(calls)
        return end

    def _recover(self, start: int, wrapped: bool) -> int:
        """Return where to resume after a malformed block: its end or the next block."""
        close = _TOOL_CALL_CLOSE if wrapped else _FUNCTION_CLOSE
        openers = [_TOOL_CALL_OPEN] if wrapped else [_TOOL_CALL_OPEN, _FUNCTION_OPEN]
        hit = self._find(close, start)
        candidates = [len(self._text) if hit < 0 else hit + len(close)]
        candidates += [self._find(opener, start + 1) for opener in openers]
        return min(candidate for candidate in candidates if candidate >= 0)

    def _at(self, token: str, pos: int) -> bool:
        """Whether ``token`` occurs at ``pos``."""
        return self._text.startswith(token, pos)

    def _snippet(self, pos: int) -> str:
        """Return a short ``repr`` of the text at ``pos`` for error messages."""
        return _preview(self._text[pos : pos + _PREVIEW_CHARS + 1])

    def _tool_call_block(self, start: int) -> tuple[list[ToolCall], int]:
        """Parse ``<tool_call>...</tool_call>`` holding JSON or ``<function=...>`` blocks."""
        pos = _skip_space(self._text, start + len(_TOOL_CALL_OPEN))
        if pos == len(self._text) or self._at(_TOOL_CALL_CLOSE, pos):
            raise _ParseError("the block is empty.")
        if self._at("{", pos):
            call, pos = self._json_call(pos)
            return [call], self._expect_close(pos, "after the JSON object")
        if not self._at(_FUNCTION_OPEN, pos):
            raise _ParseError(
                f"expected a JSON object or <function=NAME> after <tool_call>, "
                f"got {self._snippet(pos)}."
            )
        calls: list[ToolCall] = []
        while self._at(_FUNCTION_OPEN, pos):
            call, pos = self._function(pos, wrapped=True)
            calls.append(call)
            pos = _skip_space(self._text, pos)
        return calls, self._expect_close(pos, "after </function>")

    def _expect_close(self, pos: int, where: str) -> int:
        """Return the end of ``</tool_call>`` at ``pos``; it may be missing at the end."""
        pos = _skip_space(self._text, pos)
        if self._at(_TOOL_CALL_CLOSE, pos):
            return pos + len(_TOOL_CALL_CLOSE)
        if pos == len(self._text):
            return pos
        raise _ParseError(f"unexpected text {self._snippet(pos)} {where}; expected </tool_call>.")

    def _json_call(self, pos: int) -> tuple[ToolCall, int]:
        """Parse the JSON object of a ``<tool_call>`` block starting at ``pos``."""
        bounds = [self._find(_TOOL_CALL_CLOSE, pos), self._find(_TOOL_CALL_OPEN, pos)]
        close = min([hit for hit in bounds if hit >= 0], default=len(self._text))
        value, end = self._decode_json(pos, close)
        if not isinstance(value, dict):
            raise _ParseError(f"expected a JSON object, got a JSON {_json_type(value)}.")
        return _call_from_object(value, self._max_chars), end

    def _decode_json(self, pos: int, close: int) -> tuple[object, int]:
        """Decode the JSON value at ``pos``, which normally ends before ``close``.

        When the value is cut inside a string, it may hold ``</tool_call>`` or
        ``<tool_call>`` there, so decoding is retried past ``close``. Error positions (line
        and column) are those of the value cut at ``close``, relative to its start.
        """
        try:
            value, end = _DECODER.raw_decode(self._text[pos:close])
            return value, pos + end
        except json.JSONDecodeError as exc:
            message = f"invalid JSON: {exc}."
            cut_in_string = exc.msg.startswith(("Unterminated string", "Invalid \\escape"))
        except RecursionError:
            message = "invalid JSON: nested too deeply."
            cut_in_string = False
        if cut_in_string and close < len(self._text):
            decoded = self._decode_json_past_close(pos)
            if decoded is not None:
                return decoded
        raise _ParseError(message)

    def _decode_json_past_close(self, pos: int) -> tuple[object, int] | None:
        """Decode the JSON value at ``pos`` in the whole text, within the work budget."""
        if self._json_budget <= 0:
            return None
        try:
            value, end = _DECODER.raw_decode(self._text, pos)
        except json.JSONDecodeError as exc:
            # Building the error counts newlines from the start of the text.
            self._json_budget -= exc.pos + 1
            return None
        except RecursionError:
            self._json_budget = 0
            return None
        self._json_budget -= end - pos
        return value, end

    def _function(self, start: int, wrapped: bool) -> tuple[ToolCall, int]:
        """Parse ``<function=NAME><parameter=KEY>VALUE</parameter>...</function>``.

        Args:
            start: Where ``<function=`` starts.
            wrapped: Whether the function is inside a ``<tool_call>`` block, where a
                missing ``</function>`` is tolerated before ``</tool_call>`` or at the end of
                the text.

        Returns:
            The call and the position just after it.
        """
        name, pos = self._tag_name(start + len(_FUNCTION_OPEN), "function")
        arguments: dict[str, Any] = {}
        while True:
            pos = _skip_space(self._text, pos)
            if self._at(_PARAMETER_OPEN, pos):
                key, value, pos = self._parameter(pos, name)
                if key in arguments:
                    raise _ParseError(f"parameter {key!r} of function {name!r} is given twice.")
                arguments[key] = value
            elif self._at(_FUNCTION_CLOSE, pos):
                return ToolCall(name=name, arguments=arguments), pos + len(_FUNCTION_CLOSE)
            elif wrapped and (pos == len(self._text) or self._at(_TOOL_CALL_CLOSE, pos)):
                return ToolCall(name=name, arguments=arguments), pos
            elif pos == len(self._text):
                raise _ParseError(f"function {name!r} is missing its closing </function> tag.")
            else:
                raise _ParseError(
                    f"unexpected text {self._snippet(pos)} in function {name!r}; "
                    "expected <parameter=KEY> or </function>."
                )

    def _parameter(self, start: int, function: str) -> tuple[str, str, int]:
        """Parse ``<parameter=KEY>VALUE</parameter>`` into its key, raw value and end."""
        key, value_start = self._tag_name(start + len(_PARAMETER_OPEN), "parameter")
        value_end = self._find(_PARAMETER_CLOSE, value_start)
        if value_end < 0:
            raise _ParseError(
                f"parameter {key!r} of function {function!r} is missing its closing "
                f"{_PARAMETER_CLOSE} tag."
            )
        value = _strip_one_newline(self._text[value_start:value_end])
        return key, value, value_end + len(_PARAMETER_CLOSE)

    def _tag_name(self, start: int, tag: str) -> tuple[str, int]:
        """Read the NAME of ``<tag=NAME>`` from ``start``; return it and the end of the tag."""
        end = self._text.find(">", start, start + _MAX_TAG_NAME + 1)
        if end < 0:
            raise _ParseError(f"the <{tag}=...> tag is not closed by '>'.")
        name = self._text[start:end].strip()
        if not name or any(char.isspace() or char in "<=" for char in name):
            raise _ParseError(f"invalid {tag} name {_preview(name)}.")
        return name, end + 1


def _skip_space(text: str, pos: int) -> int:
    """Return the first position at or after ``pos`` that is not whitespace."""
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


def _strip_one_newline(value: str) -> str:
    """Remove exactly one leading and one trailing newline (LF or CRLF)."""
    for newline in ("\r\n", "\n"):
        if value.startswith(newline):
            value = value[len(newline) :]
            break
    for newline in ("\r\n", "\n"):
        if value.endswith(newline):
            value = value[: -len(newline)]
            break
    return value


def _cap_errors(errors: list[str]) -> list[str]:
    """Keep at most :data:`MAX_ERRORS` messages, the last one summarising the rest."""
    if len(errors) <= MAX_ERRORS:
        return list(errors)
    omitted = len(errors) - MAX_ERRORS + 1
    return [*errors[: MAX_ERRORS - 1], f"... and {omitted} more errors."]


def _too_long(what: str, length: int, max_chars: int) -> str:
    """Return the message for a text over the length limit."""
    return f"{what} is too long ({length} characters; the limit is {max_chars})."


def _json_type(value: object) -> str:
    """Name the JSON type of a decoded value."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "null" if value is None else "number"


def _describe(value: object) -> str:
    """Name a value's type, with its keys when it is a mapping."""
    name = type(value).__name__
    if isinstance(value, Mapping):
        try:
            keys = sorted(str(key) for key in value)
        except Exception:
            return name
        return f"{name} with keys {_preview(keys)}"
    return name


def _preview(value: object) -> str:
    """Return a short ``repr`` of a value for error messages."""
    if isinstance(value, str):
        more = "..." if len(value) > _PREVIEW_CHARS else ""
        return repr(value[:_PREVIEW_CHARS]) + more
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    if len(text) > _PREVIEW_CHARS:
        return text[:_PREVIEW_CHARS] + "..."
    return text
