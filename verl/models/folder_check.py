"""Which file of a model folder is broken, so that a failed load names it.

transformers and its libraries report a truncated `model.safetensors` as `SafetensorError:
incomplete metadata` and a cut `tokenizer.json` as `Expecting value: line 1 column 13`, without
the file. After a load fails, `broken_file(folder)` looks at the files a Hugging Face folder is
made of and names the first that cannot be read:

  * every top-level `*.json` (config, tokenizer, generation config, index): UTF-8 JSON;
  * every top-level `*.safetensors`: its header parses and its tensors cover the file exactly
    (what `safetensors.safe_open` checks; reading the header costs microseconds, no weights);
  * the shards `model.safetensors.index.json` lists exist.
"""

from __future__ import annotations

import json
import os
from typing import Optional

FIX = "download or save the model again"


def _json_problem(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    try:
        json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
    except ValueError as exc:
        return f"is not valid JSON ({exc}); cut short or edited by hand?"
    return None


def _safetensors_problem(path: str) -> Optional[str]:
    from safetensors import safe_open

    try:
        with safe_open(path, "pt"):
            pass
    except Exception as exc:  # noqa: BLE001 - SafetensorError and OSError both mean: unusable
        return f"is truncated or corrupted ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return None


def broken_file(folder: str) -> Optional[str]:
    """'<file> <what is wrong with it>' for the first unreadable file of `folder`, else None."""
    if not os.path.isdir(folder):
        return None
    names = sorted(os.listdir(folder))
    for name in names:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        why = (_json_problem(path) if name.endswith(".json")
               else _safetensors_problem(path) if name.endswith(".safetensors") else None)
        if why:
            return f"{path} {why}; {FIX}"
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as fh:
            shards = sorted(set((json.load(fh).get("weight_map") or {}).values()))
        missing = [s for s in shards if not os.path.isfile(os.path.join(folder, s))]
        if missing:
            return f"{os.path.join(folder, missing[0])} is missing (model.safetensors.index.json lists it); {FIX}"
    return None
