"""Real verl's code tool (`verl.tools.sandbox_fusion_tools.SandboxFusionTool`), mapped to verl's
local sandbox (verl/agents/sandbox.py: a fresh locked-down process, no network, standard library
only) instead of a SandboxFusion server: the tool YAML's `sandbox_fusion_url` is not called.

A call with `code` (and optionally `timeout`, `language`) runs the code for at most `timeout`
seconds (config.default_timeout, 30) within config.memory_limit_mb (1024), and answers its stdout
followed by its stderr when it finished, else "no stdout here" (timed out or killed), as real
verl's tool answers a run that did not finish. Only Python runs here: another language is the
answer "error: only python runs in verl's local sandbox, not <language>". Step reward: none.
As in real verl, `execute` runs `execute_code(instance_id, code, timeout, language)` through
`self.execution_pool.execute.remote(...)` (a worker thread here, a Ray pool there), so subclasses written
for real verl (retool's CustomSandboxFusionTool) run unchanged.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional
from uuid import uuid4

from verl.agents.sandbox import run_python
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

MAX_OUTPUT_CHARS = 8000


class _Remote:
    """`execute.remote(fn, *args)`: the call real verl's tools make on their Ray execution pool, here an
    awaitable that runs fn in a worker thread (so a subclass written for real verl runs unchanged)."""

    def remote(self, fn, *args, **kwargs):
        return asyncio.to_thread(fn, *args, **kwargs)


class ExecutionPool:
    def __init__(self):
        self.execute = _Remote()


class SandboxFusionTool(BaseTool):
    def __init__(self, config: dict, tool_schema):
        super().__init__(config, tool_schema)
        self.default_timeout = float(self.config.get("default_timeout", 30))
        self.default_language = str(self.config.get("default_language", "python"))
        self.memory_limit_mb = int(self.config.get("memory_limit_mb", 1024))
        self.sandbox_fusion_url = self.config.get("sandbox_fusion_url")  # kept for subclasses; not called
        self.execution_pool = ExecutionPool()
        self._instance_dict: dict[str, dict] = {}

    async def create(self, instance_id: Optional[str] = None, **kwargs) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid4())
        self._instance_dict[instance_id] = {"response": "", "reward": []}
        return instance_id, ToolResponse()

    def execute_code(self, instance_id: str, code: str, timeout: float = 30, language: str = "python") -> ToolResponse:
        if language.lower() not in ("python", "python3"):
            return ToolResponse(text=f"error: only python runs in verl's local sandbox, not {language}")
        result = run_python(code, timeout_s=timeout, cpu_s=timeout, memory_mb=self.memory_limit_mb,
                            max_output_chars=MAX_OUTPUT_CHARS)
        finished = not result.timed_out and (result.returncode is None or result.returncode >= 0)
        return ToolResponse(text=result.stdout + result.stderr if finished else "no stdout here")

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs):
        code = parameters.get("code", "")
        code = code if isinstance(code, str) else str(code)
        timeout = float(parameters.get("timeout", self.default_timeout))
        language = str(parameters.get("language", self.default_language))
        result = await self.execution_pool.execute.remote(self.execute_code, instance_id, code, timeout, language)
        return result, None, None

    async def calc_reward(self, instance_id: str, **kwargs):
        return self._instance_dict[instance_id]["reward"]

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instance_dict.pop(instance_id, None)
