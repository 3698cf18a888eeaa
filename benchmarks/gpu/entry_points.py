"""Write the dist-info that `pip install` would, from pyproject.toml, into a package folder on PYTHONPATH.

On the GPU machine verl runs from the checkout on PYTHONPATH, not pip-installed, so no dist-info declares
its entry points. vLLM finds its general plugin (verl.rollout.vllm_transformers_names: the transformers
names vLLM 0.26's LLaVA module imports) only through one, also in the child process that checks a model's
architecture.

Usage: python3 benchmarks/gpu/entry_points.py CHECKOUT SITE_DIR
"""

from __future__ import annotations

import os
import sys
import tomllib


def write_entry_points(root: str, site: str) -> str:
    """Writes SITE/verl_rl-0.0.0+checkout.dist-info/{METADATA,entry_points.txt}; returns the folder."""
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    info = os.path.join(site, "verl_rl-0.0.0+checkout.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: verl-rl\nVersion: 0.0.0+checkout\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        for group, entries in project.get("entry-points", {}).items():
            f.write(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n")
    return info


if __name__ == "__main__":
    print(write_entry_points(sys.argv[1], sys.argv[2]))
