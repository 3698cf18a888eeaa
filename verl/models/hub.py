"""Hub model names (`gpt2`, `Qwen/Qwen2.5-0.5B`): answered in seconds, online or not.

A name that is neither a local folder, `tiny:<arch>` nor a fetched short name
(`verl models fetch`) is a Hugging Face hub id. Before transformers sees it (whose download
retries print for over a minute when there is no network, before an error that names none of
the ways out), `resolve_hub_name` decides:

  1. `HF_HUB_OFFLINE=1`: the cached snapshot's folder if the model is in the Hugging Face cache,
     else a ModelLoadError at once.
  2. Otherwise one look-up of the model on the hub (`HfApi.model_info`, PROBE_TIMEOUT_S, in a
     daemon thread joined with the same bound, so a hanging DNS or proxy cannot hold it up):
     reachable and the model exists -> the name goes to transformers (which downloads what the
     cache lacks); the hub says there is no such model, or cannot be reached -> the cached folder
     if there is one, else a ModelLoadError naming the model and the ways out: a local folder,
     `verl models fetch`, a `tiny:` model.

Each name is decided once per process (the tokenizer, actor, reference and critic share it).
"""

from __future__ import annotations

import os
import threading
from typing import Optional

PROBE_TIMEOUT_S = 3.0  # the whole failure path stays under 5 s
_DECIDED: dict[str, str] = {}


def _offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set now, or when huggingface_hub was imported (it
    reads the variable once)."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE", "") or os.environ.get("TRANSFORMERS_OFFLINE", "")
    return value.strip().lower() in ("1", "true", "yes", "on") or bool(constants.HF_HUB_OFFLINE)


def _endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT") or constants.ENDPOINT


def cached_snapshot(name: str) -> Optional[str]:
    """The folder of `name`'s cached snapshot (no network), or None."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo_id=name, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached, or not a valid hub id: no cached copy either way
        return None
    return folder if os.path.isfile(os.path.join(folder, "config.json")) else None


def probe(name: str, timeout_s: float = PROBE_TIMEOUT_S) -> Optional[str]:
    """None if the hub answers that `name` exists; else why not, in a few words."""
    result: dict = {}

    def look_up():
        from huggingface_hub import HfApi

        try:
            HfApi(endpoint=_endpoint()).model_info(name, timeout=timeout_s)
            result["ok"] = True
        except Exception as exc:  # noqa: BLE001 - every failure means: not loadable from the hub now
            result["error"] = exc

    thread = threading.Thread(target=look_up, name="verl-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout_s + 0.5)
    if result.get("ok"):
        return None
    exc = result.get("error")
    if exc is None:
        return f"no answer from {_endpoint()} within {timeout_s:g}s"
    kind = type(exc).__name__
    if kind in ("RepositoryNotFoundError", "HFValidationError"):
        return f"the hub has no model named '{name}' (a private one needs HF_TOKEN)"
    text = str(exc).splitlines()[0] if str(exc) else kind
    return f"{_endpoint()} cannot be reached: {kind}: {text[:120]}"


def no_hub_message(name: str, key: str, why: str) -> str:
    return (f"{key}: '{name}' is not a local folder nor in the Hugging Face cache, and {why}. Ways out: a local "
            f"model folder ({key}: /path/to/model), a small real model for offline use (`verl models fetch "
            f"smollm2-135m-instruct`, then {key}: smollm2-135m-instruct), or a tiny local model ({key}: tiny:gpt2)")


def resolve_hub_name(name: str, key: str) -> str:
    """What to hand to from_pretrained for hub id `name`: the name itself (hub reachable), or its
    cached folder; ModelLoadError (one line) when neither works."""
    if name in _DECIDED:
        return _DECIDED[name]
    from verl.models.loading import ModelLoadError

    if _offline():
        folder = cached_snapshot(name)
        if folder is None:
            raise ModelLoadError(no_hub_message(name, key, "HF_HUB_OFFLINE=1 forbids downloads"))
        _DECIDED[name] = folder
        return folder
    why = probe(name)
    if why is None:
        _DECIDED[name] = name
        return name
    folder = cached_snapshot(name)
    if folder is None:
        raise ModelLoadError(no_hub_message(name, key, why))
    _DECIDED[name] = folder
    return folder
