"""Tools as plain Python functions, loaded from the config and run concurrently: `ToolRunner`.

A tool is a sync or async function with a type hint on every parameter and a Google-style
docstring (a description, then an `Args:` entry per parameter). Its JSON schema comes from
those (`transformers.utils.get_json_schema`), in the form chat templates take:
`tokenizer.apply_chat_template(messages, tools=[t.schema for t in tools])`.

    def add(a: int, b: int) -> int:
        \"""Add two integers.

        Args:
            a: The first summand.
            b: The second summand.
        \"""
        return a + b

`rollout.tools` lists tools as "package.module:function", "path/to/file.py:function" or a
built-in name (`BUILTIN_TOOLS`: calculator, python); `load_tools` turns that list into `Tool`s.

`ToolRunner.run(calls)` runs the calls of one turn (of all trajectories) at once, at most
`max_workers` at a time, and returns one `ToolResult` per call in call order. Nothing a tool or
a call does escapes as an exception; each of these becomes a result with `ok=False`, the message
in `text` (what the model is shown) and `error`, and the category in `kind`:

  kind            text
  unknown_tool    error: unknown tool 'foo'; the available tools are: calculator, python
  bad_arguments   error: bad arguments for add: missing a required argument: 'b' ...
                  (arguments checked against the signature and the schema's JSON types)
  raised          error: ValueError: <message>         (the tool raised; also SystemExit)
  timeout         error: timed out after 10 s          (the call is abandoned, see below)

A return value that is not a string is converted (json.dumps, else str); text longer than
`max_output_chars` is cut there with a marker (`truncated=True`; a truncated result is still ok).

Timeouts: a sync function cannot be stopped from outside, so a call past `timeout_s` is
abandoned: its result is "timed out", the run goes on, and its thread (a daemon thread, so it
cannot hold up the interpreter's exit) keeps running until the function returns by itself;
`ToolRunner.abandoned` counts such calls. An async tool runs in its own event loop in the
worker thread under `asyncio.wait_for`, so at the timeout it is really cancelled (if it awaits).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

from verl.agents.builtin_tools import BUILTIN_TOOLS
from verl.agents.tool_arguments import check_arguments
from verl.errors import ConfigError

TRUNCATION_MARKER = "\n[... output truncated: {n} more characters]"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")


@dataclass
class Tool:
    name: str
    fn: Callable
    schema: dict  # {"type": "function", "function": {"name", "description", "parameters", ...}}
    # contextual: fn(arguments: dict, context: ToolContext) instead of fn(**arguments), for tools with
    # per-trajectory state (real verl's tool classes, verl/tools/tool_config.py)
    contextual: bool = False
    # check the call's arguments against the schema before running (a tool class checks its own, as
    # real verl's loop passes the model's arguments on unchecked)
    check_schema: bool = True

    @property
    def description(self) -> str:
        return self.schema.get("function", {}).get("description", "")


@dataclass
class ToolResult:
    name: str
    text: str  # what goes back to the model: the tool's output, or the error message
    ok: bool
    error: Optional[str]  # the error message (== text) when not ok, else None
    seconds: float
    truncated: bool
    kind: Optional[str] = None  # when not ok: unknown_tool | bad_arguments | raised | timeout
    reward: Optional[float] = None  # a step reward the tool gave (ToolOutput.reward), else None


@dataclass
class ToolOutput:
    """What a tool may return instead of text: the text and a step reward (kept per trajectory in
    extra["tool_rewards"] and logged as agent/tool_reward_mean)."""

    text: str
    reward: Optional[float] = None


@dataclass
class ToolContext:
    """The trajectory a contextual tool's call belongs to (real verl's `agent_data`, the parts tools read).

    request_id: one id per trajectory; sample: the data row (extra fields, prompt, answer);
    tools_kwargs: the row's extra_info.tools_kwargs ({tool name: {"create_kwargs": {...}}});
    messages: the conversation so far in chat form; extra_fields: the tools' own per-trajectory store.
    """

    request_id: str
    sample: dict = field(default_factory=dict)
    tools_kwargs: dict = field(default_factory=dict)
    interaction_kwargs: dict = field(default_factory=dict)
    messages: list = field(default_factory=list)
    extra_fields: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    image_data: Any = None


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

_FILE_MODULES: dict[str, Any] = {}
_FILE_LOCK = threading.Lock()


def _import_file(path: str, where: str):
    """The module in `path`, imported once per process (tools and an environment in one file share it)."""
    with _FILE_LOCK:
        if path in _FILE_MODULES:
            return _FILE_MODULES[path]
        name = "verl_user_agents_" + hashlib.sha1(path.encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look modules up by name
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise ConfigError(f"{where}: importing '{path}' failed: {type(exc).__name__}: {exc}") from exc
        _FILE_MODULES[path] = module
        return module


def load_object(spec: str, where: str, what: str = "function") -> Any:
    """The object `spec` names: 'package.module:name' or 'path/to/file.py:name' (a relative path
    is resolved against the working directory; `name` may be dotted). ConfigError naming `where`."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ConfigError(f"{where}: {spec!r} must look like 'package.module:{what}' or 'path/to/file.py:{what}'")
    module_part, attr = (s.strip() for s in spec.rsplit(":", 1))
    if not module_part or not attr:
        raise ConfigError(f"{where}: {spec!r} must look like 'package.module:{what}' or 'path/to/file.py:{what}'")
    if module_part.endswith(".py") or os.sep in module_part or os.path.isfile(module_part):
        path = os.path.abspath(os.path.expanduser(module_part))
        if not os.path.isfile(path):
            raise ConfigError(f"{where}: file '{module_part}' not found (looked at {path})")
        module = _import_file(path, where)
    else:
        try:
            module = importlib.import_module(module_part)
        except ModuleNotFoundError as exc:
            raise ConfigError(f"{where}: cannot import module '{module_part}': {exc}") from exc
        except Exception as exc:
            raise ConfigError(f"{where}: importing '{module_part}' failed: {type(exc).__name__}: {exc}") from exc
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            raise ConfigError(f"{where}: '{module_part}' has no {what} '{attr}' "
                              f"(defined there: {', '.join(public) or 'nothing callable'})")
    return obj


def tool_from_callable(fn: Callable, name: Optional[str] = None) -> Tool:
    """A Tool for `fn`, its schema derived from its type hints and docstring (module docstring).

    ConfigError when they are missing or unreadable; `name` replaces the function's name.
    """
    if isinstance(fn, Tool):
        return fn if name is None else rename(fn, name)
    label = name or getattr(fn, "__name__", type(fn).__name__)
    if not callable(fn):
        raise ConfigError(f"tool {label!r}: expected a function, got {type(fn).__name__}")
    from transformers.utils import get_json_schema  # heavy; only when tools are used

    try:
        schema = copy.deepcopy(get_json_schema(fn))
    except Exception as exc:
        raise ConfigError(f"tool '{label}': cannot derive its JSON schema ({exc}); a tool needs a type hint on "
                          f"every parameter and a docstring with a description and an 'Args:' entry for each "
                          f"parameter (docs/agents.md)") from None
    tool = Tool(name=schema["function"]["name"], fn=fn, schema=schema)
    return tool if name is None else rename(tool, name)


def rename(tool: Tool, name: str) -> Tool:
    """A copy of `tool` called `name` (the schema's name too)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"tool name {name!r}: use letters, digits, '_', '.' and '-' (at most 64, not starting "
                          f"with a digit)")
    schema = copy.deepcopy(tool.schema)
    schema["function"]["name"] = name
    return Tool(name=name, fn=tool.fn, schema=schema)


def load_tools(specs: Sequence[Union[str, Callable, Tool]], key: str = "rollout.tools") -> list[Tool]:
    """Tools for `specs`: each a built-in name (BUILTIN_TOOLS), 'package.module:function',
    'path/to/file.py:function', a callable or a Tool. ConfigError naming key[i] for an unknown
    or unloadable one, a function without hints/docstring, or a repeated tool name."""
    if isinstance(specs, (str, Tool)) or callable(specs):
        specs = [specs]
    tools: list[Tool] = []
    first: dict[str, int] = {}
    for i, spec in enumerate(specs or []):
        where = f"{key}[{i}]"
        if isinstance(spec, Tool):
            tool = spec
        elif isinstance(spec, str) or callable(spec):
            if isinstance(spec, str):
                text = spec.strip()
                if text in BUILTIN_TOOLS:
                    fn = BUILTIN_TOOLS[text]
                elif ":" in text:
                    fn = load_object(text, where, "function")
                else:
                    raise ConfigError(f"{where}: unknown tool {spec!r}; a built-in ({', '.join(BUILTIN_TOOLS)}), "
                                      f"'package.module:function' or 'path/to/file.py:function'")
            else:
                fn = spec
            if inspect.isclass(fn):
                raise ConfigError(f"{where}: {spec!r} is a class; a tool is a function")
            try:
                tool = tool_from_callable(fn)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
        else:
            raise ConfigError(f"{where}: expected a tool name or 'module:function', got {type(spec).__name__}")
        if tool.name in first:
            raise ConfigError(f"{where}: a second tool named '{tool.name}' (the first is {key}[{first[tool.name]}]); "
                              f"tool names must be unique")
        first[tool.name] = i
        tools.append(tool)
    return tools


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


def to_text(value) -> str:
    """A tool's return value as text: str as is, bytes decoded, anything else json.dumps, else str."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _format_seconds(s: float) -> str:
    return f"{s:g}"


TRUNCATE_KEEPS = ("head", "tail", "middle")


def truncated_text(text: str, limit: int, keep: str = "head") -> str:
    """`text` cut to `limit` characters plus a marker naming how many were dropped: the first `limit`
    (head), the last (tail), or half of each end (middle, real verl's default side)."""
    dropped = TRUNCATION_MARKER.format(n=len(text) - limit)
    if keep == "head":
        return text[:limit] + dropped
    if keep == "tail":
        return dropped.lstrip("\n") + "\n" + text[len(text) - limit:]
    half = limit // 2
    return text[:half] + dropped + "\n" + text[len(text) - (limit - half):]


class _Job:
    __slots__ = ("index", "tool", "arguments", "context", "start", "result")

    def __init__(self, index: int, tool: Tool, arguments: dict, context=None):
        self.index, self.tool, self.arguments, self.context = index, tool, arguments, context
        self.start = 0.0
        self.result: Optional[ToolResult] = None


class ToolRunner:
    """Runs the tool calls of a turn concurrently in bounded worker threads (module docstring)."""

    def __init__(self, tools: list[Tool], timeout_s: float = 10.0, max_workers: int = 8,
                 max_output_chars: int = 2000, keep: str = "head"):
        if timeout_s <= 0 or max_workers < 1 or max_output_chars < 1 or keep not in TRUNCATE_KEEPS:
            raise ValueError(f"ToolRunner: timeout_s > 0, max_workers >= 1, max_output_chars >= 1 and keep in "
                             f"{TRUNCATE_KEEPS} needed, got {timeout_s}, {max_workers}, {max_output_chars}, {keep!r}")
        self.keep = keep
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self.tools:
                raise ValueError(f"ToolRunner: two tools named '{tool.name}'")
            self.tools[tool.name] = tool
        self.timeout_s = float(timeout_s)
        self.max_workers = int(max_workers)
        self.max_output_chars = int(max_output_chars)
        self.abandoned = 0  # calls that timed out; their threads may still be running
        self._closed = False
        self._lock = threading.Lock()

    @property
    def schemas(self) -> list[dict]:
        """The tools' JSON schemas, for apply_chat_template(..., tools=runner.schemas)."""
        return [t.schema for t in self.tools.values()]

    # -- one call ------------------------------------------------------------------------------

    def _failure(self, name: str, kind: str, message: str, seconds: float = 0.0) -> ToolResult:
        return ToolResult(name=name, text=message, ok=False, error=message, seconds=seconds, truncated=False,
                          kind=kind)

    def _precheck(self, call) -> Optional[ToolResult]:
        name, arguments = getattr(call, "name", None), getattr(call, "arguments", None)
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            known = ", ".join(self.tools) or "none"
            return self._failure(str(name), "unknown_tool",
                                 f"error: unknown tool {name!r}; the available tools are: {known}")
        problem = check_arguments(tool, arguments) if tool.check_schema else (
            None if isinstance(arguments, dict) else f"the arguments must be a JSON object, got {arguments!r}")
        if problem is not None:
            return self._failure(tool.name, "bad_arguments", f"error: bad arguments for {tool.name}: {problem}")
        return None

    def _call(self, job: _Job) -> ToolResult:
        tool, start = job.tool, time.monotonic()
        reward = None
        try:
            value = tool.fn(job.arguments, job.context) if tool.contextual else tool.fn(**job.arguments)
            if inspect.isawaitable(value):
                try:
                    value = asyncio.run(_bounded(value, self.timeout_s))
                except _AsyncTimeout:
                    return self._failure(tool.name, "timeout",
                                         f"error: timed out after {_format_seconds(self.timeout_s)} s",
                                         time.monotonic() - start)
            if isinstance(value, ToolOutput):
                value, reward = value.text, (None if value.reward is None else float(value.reward))
            text = to_text(value)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from a tool are its failures too
            message = str(exc).strip()
            text = f"error: {type(exc).__name__}" + (f": {message}" if message else "")
            return self._failure(tool.name, "raised", text, time.monotonic() - start)
        truncated = len(text) > self.max_output_chars
        if truncated:
            text = truncated_text(text, self.max_output_chars, self.keep)
        return ToolResult(name=tool.name, text=text, ok=True, error=None, seconds=time.monotonic() - start,
                          truncated=truncated, reward=reward)

    def _work(self, job: _Job, done: threading.Condition) -> None:
        result = self._call(job)
        with done:
            job.result = result
            done.notify_all()

    # -- a turn --------------------------------------------------------------------------------

    def run(self, calls: Sequence, contexts: Optional[Sequence] = None) -> list[ToolResult]:
        """One ToolResult per call (objects with .name and .arguments, e.g. ToolCall), in call order;
        `contexts[i]` (a ToolContext) is what a contextual tool's call i is given."""
        if self._closed:
            raise RuntimeError("ToolRunner.run after close()")
        results: list[Optional[ToolResult]] = [None] * len(calls)
        todo: deque[_Job] = deque()
        for i, call in enumerate(calls):
            failure = self._precheck(call)
            if failure is not None:
                results[i] = failure
            else:
                todo.append(_Job(i, self.tools[call.name], dict(call.arguments), contexts[i] if contexts else None))
        done = threading.Condition()
        running: list[_Job] = []
        with done:
            while todo or running:
                while todo and len(running) < self.max_workers:
                    job = todo.popleft()
                    job.start = time.monotonic()
                    try:
                        threading.Thread(target=self._work, args=(job, done), daemon=True,
                                         name=f"verl-tool-{job.tool.name}").start()
                    except RuntimeError as exc:  # no thread to be had (too many abandoned ones)
                        results[job.index] = self._failure(job.tool.name, "raised", f"error: RuntimeError: {exc}")
                        continue
                    running.append(job)
                now = time.monotonic()
                still = []
                for job in running:
                    if job.result is not None:
                        results[job.index] = job.result
                    elif now - job.start >= self.timeout_s:
                        results[job.index] = self._failure(
                            job.tool.name, "timeout", f"error: timed out after {_format_seconds(self.timeout_s)} s",
                            now - job.start)
                        with self._lock:
                            self.abandoned += 1
                    else:
                        still.append(job)
                freed = len(still) < len(running)
                running = still
                if running and not (freed and todo):
                    deadline = min(job.start for job in running) + self.timeout_s
                    done.wait(max(deadline - time.monotonic(), 0.0) + 1e-3)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """No more runs. Threads of abandoned calls are daemons: they die with the process."""
        self._closed = True

    def __enter__(self) -> "ToolRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _AsyncTimeout(Exception):
    """asyncio.wait_for ran out (told apart from a TimeoutError the tool raises itself)."""


async def _bounded(awaitable, timeout_s: float):
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        task.cancel()
        raise _AsyncTimeout()
    return task.result()
