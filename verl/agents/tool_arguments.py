"""A tool call's arguments checked before the call, against the tool's signature and its JSON schema
(`transformers.utils.get_json_schema`'s types, nullable, enum, array items): `check_arguments` returns
what is wrong, in words the model is shown, or None.

Written here rather than with a JSON-schema validator: the schemas come from type hints and use a small
subset (no $ref, no patterns), the message must list the tool's parameters for the model, and the
signature check (Python's own `inspect.signature(...).bind`) comes first.
"""

from __future__ import annotations

import inspect
import json
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from verl.agents.tools import Tool


_JSON_NAMES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object",
               type(None): "null"}


def _json_type(value) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _fits(value, spec: dict) -> bool:
    """Whether a decoded JSON value fits a get_json_schema property (types, nullable, enum, items)."""
    if not isinstance(spec, dict):
        return True
    if value is None and spec.get("nullable"):
        return True
    if "enum" in spec and value not in spec["enum"]:
        return False
    types = spec.get("type")
    if types is None:
        return True
    for t in types if isinstance(types, list) else [types]:
        if t == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if t == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if t == "string" and isinstance(value, str) or t == "boolean" and isinstance(value, bool):
            return True
        if t == "null" and value is None or t == "object" and isinstance(value, dict):
            return True
        if t == "array" and isinstance(value, list):
            items = spec.get("items")
            return all(_fits(v, items) for v in value) if isinstance(items, dict) else True
        if t not in ("integer", "number", "string", "boolean", "null", "object", "array"):
            return True  # "any" and what this check does not know
    return False


def _describe(spec: dict) -> str:
    types = spec.get("type", "any") if isinstance(spec, dict) else "any"
    text = " or ".join(types) if isinstance(types, list) else str(types)
    if isinstance(spec, dict) and "enum" in spec:
        text += f" (one of {', '.join(json.dumps(v) for v in spec['enum'])})"
    return text


def check_arguments(tool: Tool, arguments: dict) -> Optional[str]:
    """None when `arguments` can be passed to the tool, else what is wrong (for the model)."""
    params = tool.schema.get("function", {}).get("parameters", {}) or {}
    props = params.get("properties", {}) or {}
    listing = ", ".join(f"{n} ({_describe(s)})" for n, s in props.items()) or "none"
    if not isinstance(arguments, dict):
        return f"the arguments must be a JSON object, got {_json_type(arguments)}; the parameters are: {listing}"
    try:
        inspect.signature(tool.fn).bind(**arguments)
    except TypeError as exc:
        return f"{exc}; the parameters are: {listing}"
    except ValueError:
        pass  # no readable signature (a builtin): the call itself will tell
    missing = [n for n in params.get("required", []) if n not in arguments]
    if missing:
        return f"missing required argument(s) {', '.join(missing)}; the parameters are: {listing}"
    for name, value in arguments.items():
        spec = props.get(name)
        if spec is not None and not _fits(value, spec):
            shown = json.dumps(value, ensure_ascii=False, default=str)
            shown = shown if len(shown) <= 80 else shown[:80] + "..."
            return f"'{name}' must be {_describe(spec)}, got {_json_type(value)} {shown}"
    return None
