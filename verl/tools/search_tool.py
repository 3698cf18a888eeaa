"""Real verl's retrieval tool (`verl.tools.search_tool.SearchTool`), its behaviour: a call with
`query_list` POSTs {"queries": [...], "topk": config.topk (3), "return_scores": true} to
`config.retrieval_service_url` (the user's own retrieval server, e.g. real verl's
examples/sglang_multiturn/search_r1_like/local_dense_retriever) within `config.timeout` seconds
(30), and answers the JSON text {"result": "Doc 1 (Title: ...)\\n...\\n---\\n..."}: each query's
passages as "Doc i (Title: <first line>)\\n<rest>", queries separated by "\\n---\\n". Server errors
(5xx) and connection failures are retried up to 10 times, 1 s x attempt apart, as real verl does;
any failure is the answer's text ({"result": "Search error: ..."}), never an exception. Step reward 0.

The request goes only to the URL the tool YAML names (the user's service); urllib of the standard
library sends it (requests is not a dependency here).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any, Optional
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

MAX_RETRIES = 10
RETRY_DELAY_S = 1.0
RETRIED_STATUS = (500, 502, 503, 504)


def passages_text(passages: list) -> str:
    """One query's retrieved passages as real verl formats them (module docstring)."""
    out = []
    for i, item in enumerate(passages):
        content = item["document"]["contents"]
        title, _, text = content.partition("\n")
        out.append(f"Doc {i + 1} (Title: {title})\n{text}\n\n")
    return "".join(out).strip()


def search(url: str, queries: list, topk: int, timeout_s: float, retries: int = MAX_RETRIES,
           delay_s: float = RETRY_DELAY_S) -> tuple[Optional[dict], Optional[str]]:
    """(the server's JSON, None) or (None, the error text)."""
    body = json.dumps({"queries": queries, "topk": topk, "return_scores": True}).encode()
    last = "no attempt made"
    for attempt in range(retries):
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return json.loads(response.read().decode("utf-8")), None
        except urllib.error.HTTPError as exc:
            last = f"Server Error ({exc.code})"
            if exc.code not in RETRIED_STATUS:
                return None, f"API Request Error: {last}"
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            last = f"Connection Error: {getattr(exc, 'reason', exc)}"
        except json.JSONDecodeError as exc:
            return None, f"API Response JSON Decode Error: {exc}"
        if attempt < retries - 1:
            time.sleep(delay_s * (attempt + 1))
    return None, f"API Call Failed: {last}"


class SearchTool(BaseTool):
    def __init__(self, config: dict, tool_schema):
        super().__init__(config, tool_schema)
        self.retrieval_service_url = self.config.get("retrieval_service_url")
        if not self.retrieval_service_url:
            raise ValueError("SearchTool: config.retrieval_service_url is required (the retrieval server's URL)")
        self.topk = int(self.config.get("topk", 3))
        self.timeout = float(self.config.get("timeout", 30))
        self._instance_dict: dict[str, dict] = {}

    async def create(self, instance_id: Optional[str] = None, **kwargs) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid4())
        self._instance_dict[instance_id] = {"response": "", "reward": []}
        return instance_id, ToolResponse()

    def run_queries(self, queries: list) -> tuple[str, dict]:
        reply, error = search(self.retrieval_service_url, queries, self.topk, self.timeout)
        if error:
            return json.dumps({"result": f"Search error: {error}"}, ensure_ascii=False), {"status": "api_error"}
        results = (reply or {}).get("result", [])
        if not results:
            return json.dumps({"result": "No search results found."}, ensure_ascii=False), {"status": "no_results"}
        try:
            text = "\n---\n".join(passages_text(r) for r in results)
        except (KeyError, TypeError, AttributeError) as exc:
            return (json.dumps({"result": f"Error processing search results: {exc}"}, ensure_ascii=False),
                    {"status": "processing_error"})
        total = sum(len(r) if isinstance(r, list) else 1 for r in results)
        return json.dumps({"result": text}, ensure_ascii=False), {"status": "success", "total_results": total}

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        queries = parameters.get("query_list")
        if not queries or not isinstance(queries, list):
            error = f"Invalid parameters: query_list should be a list, got {queries}"
            return ToolResponse(text=json.dumps({"result": error})), 0.0, {}
        text, metrics = self.run_queries(queries)
        if instance_id in self._instance_dict:
            self._instance_dict[instance_id]["reward"].append(text.strip())
        return ToolResponse(text=text), 0.0, {"query_count": len(queries), **metrics}

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instance_dict.pop(instance_id, None)
