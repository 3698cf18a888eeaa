"""Verifying a weight sync: the engine holds the actor's weights (LoRA merged), read back and compared.

    problem = verify_sync(engine, actor_module)       # None, or one line saying what differs

A LoRA whose deltas never reach the engine trains on, with rewards that do not move, and nothing in the
metrics says why. The check reads back, from the engine, every weight matrix of the first and the last
decoder layer (`probe_names`: attention and MLP projections, the ones LoRA adapts) and compares them with
the actor's merged weights (`hf_named_weights`: W + scale B A) cast to the engine's dtype (an engine's
`expected_weight(name, tensor)`, where it has one, says what a sync leaves instead: an FP8 engine's
dequantized round trip), element by element. A sync writes exactly that cast, so the two are equal; a missing delta differs wherever it moves a
value across a rounding step of the engine's dtype, a fraction of the elements that grows with the delta
(a LoRA delta of 1e-4 relative shifts ~2% of bf16 values). More than MAX_DIFFERING of the elements
differing is a failed sync.

Engines expose `read_weights(names, shapes) -> {name: tensor}` (HF names, `shapes` the actor's; vLLM's fused q/k/v and gate/up
matrices are cut back into their parts: verl.rollout.vllm_weights.read_in_place). An engine without it
(one that shares the actor's module, so no sync is needed) is not checked. Run every
`rollout.verify_sync_every` steps (and at the first sync) by the trainer's experience source.
"""

from __future__ import annotations

import re
from typing import Optional

import torch

from verl.models.lora import base_model, checkpoint_name
from verl.rollout.hf_weights import hf_named_weights

LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")  # decoder layer i: Llama/Qwen, GPT-2, others
MAX_DIFFERING = 1e-3  # fraction of compared elements allowed to differ (a cast path's rare last-bit change)


def probe_names(model: torch.nn.Module) -> list[str]:
    """HF names of the 2-D weights of the first and the last decoder layer (read from the module's
    names and shapes: no LoRA delta is merged for this)."""
    names = []
    for name, tensor in base_model(model).state_dict().items():
        if ".lora_" in name or tensor.dim() != 2 or not LAYER.search(name):
            continue
        names.append(checkpoint_name(name))
    layers = sorted({int(LAYER.search(n).group(1)) for n in names})
    if not layers:
        return []
    keep = {layers[0], layers[-1]}
    return [n for n in names if int(LAYER.search(n).group(1)) in keep]


def verify_sync(engine, model: torch.nn.Module, names: Optional[list] = None) -> tuple[Optional[str], int]:
    """(None when the engine's copies of `names` (default: probe_names) equal the actor's merged weights
    cast to the engine's dtype, else one line naming the worst tensor and how many elements differ;
    the number of elements compared). A name the engine cannot give back is not compared (0 compared:
    the engine's naming is not the actor's, the caller says the check could not run)."""
    read, expected = getattr(engine, "read_weights", None), getattr(engine, "expected_weight", None)
    names = names if names is not None else probe_names(model)
    if read is None or not names:
        return None, 0
    wanted = set(names)
    shapes = {n: tuple(t.shape) for n, t in base_model(model).state_dict().items()}
    shapes.update({checkpoint_name(n): s for n, s in shapes.items()})
    got = read(names, shapes)
    total = differing = 0
    worst = (0.0, None)
    for name, value in hf_named_weights(model, skip=lambda n: n not in wanted):  # n: the checkpoint name
        if name not in got:
            continue
        held = got[name].detach().to("cpu")
        if expected is not None:  # what the sync leaves there (rollout.quantization fp8: the FP8 round trip)
            value = expected(name, value)
        expect = value.detach().to("cpu", held.dtype)
        if held.shape != expect.shape:
            return f"'{name}' is {tuple(held.shape)} in the engine but {tuple(expect.shape)} in the actor", total
        n_diff = int((held != expect).sum())
        total += held.numel()
        differing += n_diff
        share = n_diff / max(1, held.numel())
        if share > worst[0]:
            worst = (share, name)
    if total and differing / total > MAX_DIFFERING:
        return (f"{differing} of {total} compared weight elements differ between the engine and the actor "
                f"({worst[0]:.1%} of '{worst[1]}')"), total
    return None, total
