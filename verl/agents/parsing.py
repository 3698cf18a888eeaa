"""Tool calls out of a model's turn text: `parse_tool_calls(text, fmt)`.

Formats (`TOOL_CALL_FORMATS`):

* "hermes" (Qwen2/2.5/3, Hermes, SmolLM3 ...): each call is
  `<tool_call>{"name": "calculator", "arguments": {"expression": "1+2"}}</tool_call>`; a message
  may hold several, with text around them. `arguments` may also be a JSON-encoded string; an
  opening tag the generation never closed (it stopped at EOS) is read to the end of the text.
* "llama3" (Llama 3.x JSON tool calling): the whole message is a JSON object
  `{"name": ..., "parameters": {...}}` (or `"arguments"`), optionally after `<|python_tag|>`,
  or several such objects separated by ";". A message that does not start with "{" (after the
  tag) is plain text: no call.
* "regex": a user pattern with the named groups `(?P<name>...)` and `(?P<arguments>...)` (the
  latter JSON); every match is a call. `compile_pattern` checks a pattern up front.

Parsing never raises for what the model wrote: broken JSON, a missing or non-string name,
arguments that are not an object become `ParseResult.errors`, one message per malformed call,
written to be sent back to the model as the tool turn. Text without a call gives empty lists.
Whether a named tool exists, and whether the arguments fit it, is the ToolRunner's business.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Optional

TOOL_CALL_FORMATS = ("hermes", "llama3", "regex")

_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_PYTHON_TAG = "<|python_tag|>"
_LLAMA_END = ("<|eom_id|>", "<|eot_id|>")
_SHOWN = 200  # characters of a malformed call quoted back in its error


@dataclass
class ToolCall:
    name: str
    arguments: dict
    raw: str  # the text the call was read from (tags included)


@dataclass
class ParseResult:
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one message to the model per malformed call


def _shown(raw: str) -> str:
    raw = raw.strip()
    return raw if len(raw) <= _SHOWN else raw[:_SHOWN] + "..."


def _json_error(exc: json.JSONDecodeError) -> str:
    return f"{exc.msg} at line {exc.lineno} column {exc.colno}"


def _call_from_object(obj, raw: str, arg_keys: tuple[str, ...]) -> tuple[Optional[ToolCall], Optional[str]]:
    """A ToolCall from a decoded {"name": ..., "arguments": ...} object, or the error message."""
    if not isinstance(obj, dict):
        return None, f"error: a tool call must be a JSON object with \"name\" and \"arguments\", got {_shown(raw)}"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, f"error: tool call without a \"name\" (a non-empty string): {_shown(raw)}"
    key = next((k for k in arg_keys if k in obj), None)
    arguments = {} if key is None else obj[key]
    if isinstance(arguments, str):  # OpenAI-style: the arguments as a JSON string
        text = arguments.strip()
        try:
            arguments = json.loads(text) if text else {}
        except json.JSONDecodeError as exc:
            return None, f"error: the arguments of tool call '{name}' are not valid JSON ({_json_error(exc)}): " \
                         f"{_shown(raw)}"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None, f"error: the arguments of tool call '{name}' must be a JSON object, got " \
                     f"{type(arguments).__name__}: {_shown(raw)}"
    return ToolCall(name=name.strip(), arguments=arguments, raw=raw), None


def _decode(body: str):
    body = body.strip()
    fenced = _FENCE.match(body)
    return json.loads(fenced.group(1) if fenced else body)


def _parse_hermes(text: str) -> ParseResult:
    result = ParseResult()
    for match in _HERMES.finditer(text):
        raw, body = match.group(0), match.group(1)
        closed = raw.endswith("</tool_call>")
        if not body.strip():
            result.errors.append("error: empty <tool_call></tool_call>: write a JSON object with \"name\" and "
                                 "\"arguments\" inside")
            continue
        try:
            obj = _decode(body)
        except json.JSONDecodeError as exc:
            hint = "" if closed else " (the <tool_call> tag was never closed)"
            result.errors.append(f"error: the tool call is not valid JSON ({_json_error(exc)}){hint}: {_shown(raw)}")
            continue
        call, error = _call_from_object(obj, raw, ("arguments", "parameters"))
        result.calls.append(call) if call else result.errors.append(error)
    return result


def _parse_llama3(text: str) -> ParseResult:
    result = ParseResult()
    body = text.strip()
    tagged = body.startswith(_PYTHON_TAG)
    if tagged:
        body = body[len(_PYTHON_TAG):].lstrip()
    for end in _LLAMA_END:
        if body.endswith(end):
            body = body[: -len(end)].rstrip()
    if not body.startswith("{"):
        if tagged and body:  # the tag promises a call: say why none was read
            result.errors.append(f"error: expected a JSON object after <|python_tag|>, got {_shown(body)}")
        return result
    decoder, pos = json.JSONDecoder(), 0
    while pos < len(body):
        try:
            obj, end = decoder.raw_decode(body, pos)
        except json.JSONDecodeError as exc:
            result.errors.append(f"error: the tool call is not valid JSON ({_json_error(exc)}): {_shown(body[pos:])}")
            return result
        raw = body[pos:end]
        call, error = _call_from_object(obj, raw, ("parameters", "arguments"))
        result.calls.append(call) if call else result.errors.append(error)
        pos = end
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos < len(body):
            if body[pos] != ";":
                result.errors.append(f"error: expected ';' between tool calls, got {_shown(body[pos:])}")
                return result
            pos += 1
            while pos < len(body) and body[pos].isspace():
                pos += 1
    return result


@functools.lru_cache(maxsize=64)
def compile_pattern(pattern: str) -> re.Pattern:
    """`pattern` compiled (DOTALL); a ValueError saying what is wrong unless it is a valid regular
    expression with the named groups `name` and `arguments`."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("the regex tool-call format needs a pattern with the groups (?P<name>...) and "
                         "(?P<arguments>...)")
    try:
        compiled = re.compile(pattern, re.DOTALL)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    missing = [g for g in ("name", "arguments") if g not in compiled.groupindex]
    if missing:
        raise ValueError(f"the pattern {pattern!r} lacks the named group(s) "
                         f"{', '.join(f'(?P<{g}>...)' for g in missing)}")
    return compiled


def _parse_regex(text: str, pattern: str) -> ParseResult:
    result = ParseResult()
    for match in compile_pattern(pattern).finditer(text):
        raw, name, arguments = match.group(0), match.group("name"), match.group("arguments")
        if arguments is None or not arguments.strip():
            obj = {"name": name, "arguments": {}}
        else:
            try:
                obj = {"name": name, "arguments": _decode(arguments)}
            except json.JSONDecodeError as exc:
                result.errors.append(f"error: the arguments of tool call '{name}' are not valid JSON "
                                     f"({_json_error(exc)}): {_shown(raw)}")
                continue
        call, error = _call_from_object(obj, raw, ("arguments",))
        result.calls.append(call) if call else result.errors.append(error)
    return result


def parse_tool_calls(text: str, fmt: str = "hermes", pattern: Optional[str] = None) -> ParseResult:
    """The tool calls in one model turn, and an error message for each malformed one (module doc).

    An unknown `fmt`, or `fmt="regex"` with a bad `pattern`, is a ValueError: a configuration
    mistake, caught when the config is checked, not something the model did.
    """
    if fmt == "hermes":
        return _parse_hermes(text or "")
    if fmt == "llama3":
        return _parse_llama3(text or "")
    if fmt == "regex":
        return _parse_regex(text or "", pattern)
    raise ValueError(f"unknown tool-call format {fmt!r}; one of {', '.join(TOOL_CALL_FORMATS)}")
