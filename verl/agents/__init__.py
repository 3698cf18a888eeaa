"""The tool layer of multi-turn rollouts: tools as Python functions (`tools`), tool-call parsing
(`parsing`), the built-in calculator and sandboxed Python (`builtin_tools`, `sandbox`) and
environments (`environment`). docs/agents.md shows how to write a tool and an environment.

This package sits below the rollout: it imports nothing of verl but `verl.errors`.
"""

from verl.agents.builtin_tools import BUILTIN_TOOLS, calculator, python
from verl.agents.environment import Environment, GuessNumberEnv, StepResult, as_step_result, load_environment
from verl.agents.parsing import TOOL_CALL_FORMATS, ParseResult, ToolCall, compile_pattern, parse_tool_calls
from verl.agents.sandbox import SandboxResult, run_python, sandbox_info
from verl.agents.tools import Tool, ToolResult, ToolRunner, load_tools, tool_from_callable

__all__ = [
    "BUILTIN_TOOLS", "TOOL_CALL_FORMATS", "Environment", "GuessNumberEnv", "ParseResult", "SandboxResult", "StepResult",
    "Tool", "ToolCall", "ToolResult", "ToolRunner", "as_step_result", "calculator", "compile_pattern",
    "load_environment", "load_tools", "parse_tool_calls", "python", "run_python", "sandbox_info",
    "tool_from_callable",
]
