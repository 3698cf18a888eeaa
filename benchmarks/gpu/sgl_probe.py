"""SGLang's version and the signatures of the Engine methods verl calls, as JSON
(`bash benchmarks/h200_run.sh sgl-probe`, with SGLang's folder on PYTHONPATH).

Usage: python3 benchmarks/gpu/sgl_probe.py OUT.json
"""

from __future__ import annotations

import inspect
import json
import sys

ENGINE_METHODS = ("generate", "update_weights_from_tensor", "release_memory_occupation",
                  "resume_memory_occupation", "flush_cache", "shutdown")


def probe() -> dict:
    import sglang
    from sglang.srt.entrypoints.engine import Engine

    from verl.rollout.sglang_rollout import supported_architectures

    info = dict(sglang=sglang.__version__)
    for name in ENGINE_METHODS:
        info[name] = str(inspect.signature(getattr(Engine, name)))
    try:
        from sglang.srt.constants import GPU_MEMORY_ALL_TYPES
        info["memory_types"] = list(GPU_MEMORY_ALL_TYPES)
    except Exception as exc:  # noqa: BLE001 - older SGLang lacks the constant: say so in the probe
        info["memory_types"] = f"missing: {exc}"
    archs = supported_architectures()
    info["llama_supported"] = archs is not None and "LlamaForCausalLM" in archs
    return info


if __name__ == "__main__":
    found = probe()
    with open(sys.argv[1], "w") as f:
        json.dump(found, f, indent=1)
    print(found)
