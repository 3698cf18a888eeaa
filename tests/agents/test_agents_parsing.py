"""Tool-call parsing (verl.agents.parsing): every format, several calls, and malformed calls turned
into messages for the model instead of exceptions."""

from __future__ import annotations

import pytest

from verl.agents.parsing import TOOL_CALL_FORMATS, compile_pattern, parse_tool_calls


def _calls(result):
    return [(c.name, c.arguments) for c in result.calls]


# --------------------------------------------------------------------------- hermes


def test_hermes_several_calls_with_text_around_them():
    text = ('Let me compute both.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "127 + 385"}}\n'
            '</tool_call>\nand\n<tool_call>{"name": "python", "arguments": {"code": "print(2 ** 10)"}}</tool_call>')
    result = parse_tool_calls(text, "hermes")
    assert _calls(result) == [("calculator", {"expression": "127 + 385"}), ("python", {"code": "print(2 ** 10)"})]
    assert result.errors == []
    assert result.calls[0].raw.startswith("<tool_call>") and result.calls[0].raw.endswith("</tool_call>")


def test_hermes_arguments_as_a_json_string_and_missing_arguments():
    text = ('<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"6*7\\"}"}</tool_call>'
            '<tool_call>{"name": "now"}</tool_call>')
    assert _calls(parse_tool_calls(text)) == [("calculator", {"expression": "6*7"}), ("now", {})]


def test_hermes_call_left_open_at_the_end_of_the_generation():
    # Generation stopped at the stop string "</tool_call>", which engines leave out of the text.
    result = parse_tool_calls('<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n')
    assert _calls(result) == [("calculator", {"expression": "1+1"})] and result.errors == []


def test_hermes_json_in_a_code_fence():
    text = '<tool_call>```json\n{"name": "calculator", "arguments": {"expression": "2"}}\n```</tool_call>'
    assert _calls(parse_tool_calls(text)) == [("calculator", {"expression": "2"})]


def test_no_call_gives_empty_lists():
    regex = {"pattern": r"CALL (?P<name>\w+)(?P<arguments>\{.*\})"}
    for fmt, kwargs in (("hermes", {}), ("llama3", {}), ("regex", regex)):
        for text in ("The answer is 512.", "", "I think {x} is 3."):
            result = parse_tool_calls(text, fmt, **kwargs)
            assert result.calls == [] and result.errors == [], (fmt, text)


# --------------------------------------------------------------------------- llama3


def test_llama3_json_message_with_python_tag_and_end_token():
    text = '<|python_tag|>{"name": "calculator", "parameters": {"expression": "2*3"}}<|eom_id|>'
    result = parse_tool_calls(text, "llama3")
    assert _calls(result) == [("calculator", {"expression": "2*3"})] and result.errors == []


def test_llama3_plain_json_and_several_calls_separated_by_semicolons():
    assert _calls(parse_tool_calls('{"name": "calculator", "arguments": {"expression": "1"}}', "llama3")) == \
        [("calculator", {"expression": "1"})]
    text = '{"name": "a", "parameters": {"s": "x; y"}}; {"name": "b", "parameters": {}} ;{"name": "c"}'
    assert _calls(parse_tool_calls(text, "llama3")) == [("a", {"s": "x; y"}), ("b", {}), ("c", {})]


def test_llama3_arguments_as_a_json_string():
    text = '{"name": "calculator", "parameters": "{\\"expression\\": \\"9-1\\"}"}'
    assert _calls(parse_tool_calls(text, "llama3")) == [("calculator", {"expression": "9-1"})]


def test_llama3_malformed():
    broken = parse_tool_calls('{"name": "calculator", "parameters": {"expression": "1+', "llama3")
    assert broken.calls == [] and len(broken.errors) == 1 and "not valid JSON" in broken.errors[0]
    no_name = parse_tool_calls('{"parameters": {"x": 1}}', "llama3")
    assert no_name.calls == [] and '"name"' in no_name.errors[0]
    after_tag = parse_tool_calls("<|python_tag|>calculator(1+1)", "llama3")
    assert after_tag.calls == [] and "after <|python_tag|>" in after_tag.errors[0]
    junk = parse_tool_calls('{"name": "a", "parameters": {}} and then some text', "llama3")
    assert _calls(junk) == [("a", {})] and "expected ';'" in junk.errors[0]


# --------------------------------------------------------------------------- regex

PATTERN = r"<call name=\"(?P<name>\w+)\">(?P<arguments>.*?)</call>"


def test_regex_format_with_named_groups():
    text = ('<call name="calculator">{"expression": "3**2"}</call> then <call name="python">{"code": "print(1)"}</call>'
            '<call name="noargs"></call>')
    result = parse_tool_calls(text, "regex", PATTERN)
    assert _calls(result) == [("calculator", {"expression": "3**2"}), ("python", {"code": "print(1)"}), ("noargs", {})]
    assert result.errors == []


def test_regex_malformed_arguments_are_errors():
    text = '<call name="calculator">{"expression": 3**2}</call><call name="calculator">[1, 2]</call>'
    result = parse_tool_calls(text, "regex", PATTERN)
    assert result.calls == [] and len(result.errors) == 2
    assert "not valid JSON" in result.errors[0] and "must be a JSON object" in result.errors[1]


def test_bad_patterns_and_formats_are_value_errors():
    with pytest.raises(ValueError, match="arguments"):
        compile_pattern(r"(?P<name>\w+)")
    with pytest.raises(ValueError, match="invalid regular expression"):
        compile_pattern(r"(?P<name>\w+")
    with pytest.raises(ValueError, match="needs a pattern"):
        parse_tool_calls("x", "regex")
    with pytest.raises(ValueError, match="hermes, llama3, regex"):
        parse_tool_calls("x", "json")
    assert TOOL_CALL_FORMATS == ("hermes", "llama3", "regex")


# --------------------------------------------------------------------------- malformed (hermes)


@pytest.mark.parametrize("body, expected", [
    ('{"name": "calculator", "arguments": {"expression": "1+2"}', "not valid JSON"),   # missing brace
    ("{'name': 'calculator'}", "not valid JSON"),                                       # Python, not JSON
    ('{"arguments": {"expression": "1"}}', '"name"'),                                   # no name
    ('{"name": "", "arguments": {}}', '"name"'),                                        # empty name
    ('{"name": 5, "arguments": {}}', '"name"'),                                         # non-string name
    ('{"name": "calculator", "arguments": ["1+2"]}', "must be a JSON object"),          # non-dict arguments
    ('{"name": "calculator", "arguments": "not json"}', "not valid JSON"),              # bad JSON string
    ('["calculator", {"expression": "1"}]', "must be a JSON object"),                   # not an object
    ("", "empty <tool_call>"),
])
def test_hermes_malformed_calls_become_messages(body, expected):
    result = parse_tool_calls(f"Sure. <tool_call>{body}</tool_call>")
    assert result.calls == []
    assert len(result.errors) == 1 and expected in result.errors[0]
    assert result.errors[0].startswith("error: ")


def test_good_and_bad_calls_in_one_message_are_kept_apart():
    text = ('<tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>'
            '<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>'
            '<tool_call>{"name": "calculator", "arguments": {"expression": "2"}}</tool_call>')
    result = parse_tool_calls(text)
    assert _calls(result) == [("calculator", {"expression": "1"}), ("calculator", {"expression": "2"})]
    assert len(result.errors) == 1


def test_long_malformed_calls_are_quoted_short():
    result = parse_tool_calls("<tool_call>{" + "x" * 10_000 + "</tool_call>")
    assert len(result.errors) == 1 and len(result.errors[0]) < 400
