"""A tool YAML of real verl's layout -> verl Tools that run real verl's tool classes (`load_tool_config`).

    tools:
      - class_name: verl.tools.gsm8k_tool.Gsm8kTool     # dotted path, or path/to/file.py:Class
        config: {type: native, ...}                      # the class's own settings; type: native
        tool_schema: {type: function, function: {name: calc_gsm8k_reward, description: ..., parameters: ...}}

Each entry's class is made once, `cls(config=config, tool_schema=OpenAIFunctionToolSchema)`, and
becomes a contextual `Tool` (verl/agents/tools.py) named by its schema. A call runs real verl's
lifecycle for it, as real verl's tool agent loop does: `create(create_kwargs=...)` with the row's
`extra_info.tools_kwargs.<name>.create_kwargs`, `execute(instance_id, arguments, agent_data=context)`,
then `release(instance_id)` whatever happened. The response's text is the tool's answer and its
step reward is kept (ToolOutput); a response with images or videos is an error answer for a text
rollout. The model's arguments reach the class unchecked, as in real verl (the class checks them).

Every problem with the file is one ConfigError naming `key`, the file and the entry: no such file,
not YAML, no `tools` list, a missing class_name, a class that cannot be imported or built, an MCP
entry (`type: mcp`: MCP servers are not supported here), two tools of one name.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import yaml

from verl.agents.tools import Tool, ToolContext, ToolOutput, load_object
from verl.errors import ConfigError
from verl.tools.schemas import OpenAIFunctionToolSchema


def read_yaml_list(path: str, key: str, section: str) -> list:
    """The `section` list of the YAML file at `path`; ConfigError naming `key` and the file otherwise."""
    full = os.path.abspath(os.path.expanduser(str(path)))
    if not os.path.isfile(full):
        raise ConfigError(f"{key}: file '{path}' not found (looked at {full})")
    try:
        with open(full, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{key}: '{path}' is not valid YAML: {str(exc).splitlines()[0]}") from None
    entries = data.get(section) if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{key}: '{path}' needs a non-empty '{section}:' list (real verl's layout)")
    return entries


def import_class(name: str, where: str) -> type:
    """The class a dotted path ('pkg.module.Class') or 'file.py:Class' names; ConfigError at `where`."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{where}: class_name is required")
    if ":" in name:
        cls = load_object(name, where, "Class")
    else:
        module_name, _, attr = name.strip().rpartition(".")
        if not module_name:
            raise ConfigError(f"{where}: class_name {name!r} must be a dotted path 'package.module.Class'")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"{where}: cannot import '{module_name}' for {name!r}: {exc}") from None
        cls = getattr(module, attr, None)
        if cls is None:
            raise ConfigError(f"{where}: '{module_name}' has no class '{attr}'")
    if not isinstance(cls, type):
        raise ConfigError(f"{where}: {name!r} is not a class")
    return cls


def _as_tool(obj: Any, where: str) -> Tool:
    """A contextual Tool running `obj`'s create / execute / release per call (module docstring)."""
    for method in ("create", "execute", "release"):
        if not callable(getattr(obj, method, None)):
            raise ConfigError(f"{where}: {type(obj).__name__} has no {method}() (real verl's BaseTool interface)")
    schema = obj.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
    name = schema["function"]["name"]

    async def call(arguments: dict, context: ToolContext) -> ToolOutput:
        create_kwargs = ((context.tools_kwargs or {}).get(name) or {}).get("create_kwargs") or {}
        instance_id, _ = await obj.create(create_kwargs=create_kwargs)
        try:
            response, reward, _metrics = await obj.execute(instance_id, arguments, agent_data=context)
        finally:
            await obj.release(instance_id)
        if getattr(response, "image", None) or getattr(response, "video", None):
            raise ValueError(f"{name} answered with images or videos, which a text rollout cannot show")
        return ToolOutput(text=getattr(response, "text", None) or "", reward=reward)

    call.__name__ = name
    return Tool(name=name, fn=call, schema=schema, contextual=True, check_schema=False)


def load_tool_config(path: str, key: str = "rollout.tool_config") -> list[Tool]:
    tools, seen = [], {}
    for i, entry in enumerate(read_yaml_list(path, key, "tools")):
        where = f"{key} ('{path}', tools[{i}])"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping with class_name, config and tool_schema")
        config = entry.get("config") or {}
        if not isinstance(config, dict):
            raise ConfigError(f"{where}: config must be a mapping")
        kind = str(config.get("type", "native")).lower()
        if kind != "native":
            raise ConfigError(f"{where}: config.type {kind!r} is not supported: only native tool classes run here "
                              "(MCP servers are not supported)")
        cls = import_class(entry.get("class_name"), where)
        try:
            schema = (OpenAIFunctionToolSchema.model_validate(entry["tool_schema"])
                      if entry.get("tool_schema") is not None else None)
            obj = cls(config=config, tool_schema=schema)
        except ConfigError:
            raise
        except Exception as exc:  # the user's class: any failure to build it is this entry's fault
            raise ConfigError(f"{where}: building {cls.__name__} failed: {type(exc).__name__}: {exc}") from None
        tool = _as_tool(obj, where)
        if tool.name in seen:
            raise ConfigError(f"{where}: a second tool named '{tool.name}' (the first is tools[{seen[tool.name]}])")
        seen[tool.name] = i
        tools.append(tool)
    return tools
