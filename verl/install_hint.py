"""The install line for an optional part of verl (an engine, a tracker, Ray), said in one place.

The package index's `verl` is another project (volcengine's, called "real verl" in these docs), which uses
the same import name: `pip install 'verl[vllm]'` would install real verl, not this one. This project installs from
its checkout (its distribution is named `verl-rl`, a name no one else uses on the index), so the hint names
the checkout's folder when verl runs from one.
"""

from __future__ import annotations

import os


def checkout_root() -> str | None:
    """The folder of the checkout verl runs from (an editable install or PYTHONPATH), None for a regular install."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as fh:
            return root if 'name = "verl-rl"' in fh.read() else None
    except OSError:
        return None


def pip_extra(extra: str) -> str:
    """`pip install -e '/path/to/checkout[vllm]'`: what installs `extra` next to this verl."""
    root = checkout_root()
    return f"pip install -e '{root}[{extra}]'" if root else f"pip install -e '.[{extra}]' in verl's checkout"
