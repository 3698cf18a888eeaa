"""The OpenAI-style schemas and the tool response of real verl's tool interface.

Real verl declares these as pydantic models; here they are dataclasses with the methods tool
code calls on them (`model_validate`, `model_dump`, attribute access), so pydantic is not a
dependency. `OpenAIFunctionToolSchema.model_validate(d)` reads the `tool_schema` block of a
tool YAML:

    {"type": "function", "function": {"name": ..., "description": ..., "parameters": {
        "type": "object", "properties": {"answer": {"type": "string", ...}}, "required": [...]}}}

Unknown entries inside `parameters` (an array's `items`, ...) are kept as given: the chat
template receives the schema as the YAML wrote it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


@dataclass
class OpenAIFunctionSchema:
    name: str
    description: str = ""
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}, "required": []})
    strict: bool = False


@dataclass
class OpenAIFunctionToolSchema:
    type: str
    function: OpenAIFunctionSchema

    @classmethod
    def model_validate(cls, data: Any) -> "OpenAIFunctionToolSchema":
        """From a dict (a tool YAML's tool_schema) or an instance; ValueError naming what is missing."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict) or not isinstance(data.get("function"), dict):
            raise ValueError(f"a tool schema needs 'type' and a 'function' mapping, got {str(data)[:120]!r}")
        fn = data["function"]
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"a tool schema's function needs a 'name', got {str(fn)[:120]!r}")
        params = fn.get("parameters")
        params = copy.deepcopy(params) if isinstance(params, dict) else {"type": "object", "properties": {},
                                                                          "required": []}
        return cls(type=str(data.get("type", "function")),
                   function=OpenAIFunctionSchema(name=fn["name"], description=str(fn.get("description") or ""),
                                                 parameters=params, strict=bool(fn.get("strict", False))))

    def model_dump(self, exclude_unset: bool = False, exclude_none: bool = False) -> dict:
        out = {"type": self.type, "function": {"name": self.function.name, "description": self.function.description,
                                               "parameters": copy.deepcopy(self.function.parameters)}}
        if self.function.strict or not exclude_unset:
            out["function"]["strict"] = self.function.strict
        return _without_none(out) if exclude_none else out


@dataclass
class ToolResponse:
    """What a tool call gives back: text, and (vision-language models) images or videos as lists."""

    text: Optional[str] = None
    image: Optional[list] = None
    video: Optional[list] = None

    def __post_init__(self):
        for name in ("image", "video"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, list):
                raise ValueError(f"ToolResponse.{name} must be a list (wrap one item as [item]), got "
                                 f"{type(value).__name__}")

    def is_empty(self) -> bool:
        return not self.text and not self.image and not self.video

    def is_text_only(self) -> bool:
        return bool(self.text) and not self.image and not self.video

    def model_dump(self) -> dict:
        return {"text": self.text, "image": self.image, "video": self.video}
