"""The versions a GPU run used, as JSON: torch, CUDA, transformers, Python, the card and its memory, and
vLLM / TRL / datasets / peft where they import (`bash benchmarks/h200_run.sh versions`).

Usage: python3 benchmarks/gpu/versions.py OUT.json
"""

from __future__ import annotations

import json
import platform
import sys


def versions() -> dict:
    import torch
    import transformers

    info = dict(torch=torch.__version__, cuda=torch.version.cuda, transformers=transformers.__version__,
                python=platform.python_version())
    if torch.cuda.is_available():
        info.update(gpu=torch.cuda.get_device_name(0),
                    gpu_memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
    else:
        info["gpu"] = "none"
    for name in ("vllm", "trl", "datasets", "peft"):
        try:
            info[name] = __import__(name).__version__
        except Exception as exc:  # noqa: BLE001 - a package that fails to import is reported, not fatal
            info[name] = f"missing: {exc}"
    return info


if __name__ == "__main__":
    found = versions()
    with open(sys.argv[1], "w") as f:
        json.dump(found, f, indent=1)
    print(found)
