"""Random generator states for an exact resume, stored as tensors so they load with weights_only."""

from __future__ import annotations

import random

import torch


def capture_rng(generators: dict[str, torch.Generator]) -> dict:
    """Every random generator a step uses: torch (CPU and CUDA), python `random`, numpy, and
    the named torch.Generators (e.g. the actor's and critic's mini-batch shufflers).
    Python/numpy states become int64 tensors so the file loads with weights_only=True."""
    version, mt, gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else [],
        "python": {"version": int(version), "state": torch.tensor(mt, dtype=torch.int64), "gauss": gauss},
        "generators": {name: g.get_state() for name, g in generators.items()},
    }
    try:
        import numpy as np

        key, arr, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {"key": str(key), "state": torch.from_numpy(arr.astype(np.int64)), "pos": int(pos),
                          "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
    except ImportError:
        pass
    return state


def restore_rng(state: dict, generators: dict[str, torch.Generator]) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
    if "numpy" in state:
        import numpy as np

        n = state["numpy"]
        np.random.set_state((n["key"], n["state"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                             n["cached_gaussian"]))
    for name, g in generators.items():
        if name in state["generators"]:
            g.set_state(state["generators"][name])
