"""Mixture-of-experts decoders: their routers, the router's auxiliary loss, expert load, and routing replay.

The families supported (transformers 5 classes): Qwen2-MoE, Qwen3-MoE, Mixtral and OLMoE. Each MoE layer
has a top-k router module (`*TopKRouter`) that maps the layer's tokens, hidden states (N, H) flattened in
row-major order over the batch, to

    logits = h W^T                       (N, E)   W: the router's weight (E, H)
    probs  = softmax(logits) in float32  (N, E)
    idx    = top_k(probs)                (N, k)   the experts each token goes to
    w      = probs[idx]  (/ its sum when the family normalises: norm_topk_prob, always for Mixtral)

and the layer's experts mix their outputs with the weights w. `MoeRouting(model)` finds those modules in
layer order and does two things with them:

* records, within `with routing.recording() as rec:`, each router call's logits and chosen experts
  (forward hooks: the computation is untouched). The auxiliary loss and the expert-load metrics read them.
* replays given choices (`routing.replay(idx)`, idx (N, L, k) long, -1 where the router chooses itself):
  the router's forward is replaced by one that computes the same logits and probabilities, takes the
  given experts instead of its top-k, and weights them with the probabilities at those experts (normalised
  as the family does), so the router's weight still gets its gradient through the chosen experts' scores.
  With its own choices given, the replay computes exactly what the original forward does.

The replacement forward is written here, not taken from transformers, because transformers has no hook to
choose the experts: it restates the four routers' shared computation (checked against each family's own
forward, bit for bit, in tests/models/test_moe.py). A router class not in ROUTERS is not an MoE layer here.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Optional

import torch
import torch.nn.functional as F

# what a batch keeps the replayed experts in (Batch.routed_experts): expert indices and -1 fit 16 bits
EXPERT_DTYPE = torch.int16
# router class -> whether its weights are cast back to the logits' dtype (Mixtral's stay float32)
ROUTERS = {"Qwen2MoeTopKRouter": True, "Qwen3MoeTopKRouter": True, "MixtralTopKRouter": False,
           "OlmoeTopKRouter": True}


def _router_class(module: torch.nn.Module) -> str:
    """The module's class name, as the family names it: LoRA on a router's weight (peft's ParamWrapper)
    parametrizes the router while it runs, which renames its class `Parametrized<Name>`."""
    name = type(module).__name__
    return name[len("Parametrized"):] if name.startswith("Parametrized") else name


def routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's MoE router modules in layer order ([] for a dense model)."""
    return [m for m in model.modules() if _router_class(m) in ROUTERS]


def is_moe(model: torch.nn.Module) -> bool:
    return bool(routers(model))


def _normalises(router) -> bool:
    return bool(getattr(router, "norm_topk_prob", True))  # Mixtral's router always normalises


def route(router, hidden: torch.Tensor, given: Optional[torch.Tensor]) -> tuple:
    """(logits (N, E), weights (N, k), experts (N, k)) of `router` for hidden states (..., H): its own top-k,
    or the experts `given` (N, k) where they are >= 0 (module docstring)."""
    h = hidden.reshape(-1, router.hidden_dim)
    logits = F.linear(h, router.weight)
    probs = F.softmax(logits.float(), dim=-1)
    top, idx = torch.topk(probs, router.top_k, dim=-1)
    if given is not None:
        given = given.to(idx.device, torch.long)
        idx = torch.where(given >= 0, given, idx)
        top = probs.gather(-1, idx)
    if _normalises(router):
        top = top / top.sum(dim=-1, keepdim=True)
    if ROUTERS[_router_class(router)]:
        top = top.to(logits.dtype)
    return logits, top, idx


class Recording:
    """The router calls of a forward: `logits[l]` (N, E) and `experts[l]` (N, k) per MoE layer l, in layer
    order; several forwards in one recording (generation: prefill, then one call per decoded token) give
    `calls[l]`, the list of each call's (logits, experts)."""

    def __init__(self, n_layers: int):
        self.calls: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(n_layers)]

    @property
    def logits(self) -> list[torch.Tensor]:
        return [c[0][0] for c in self.calls]

    @property
    def experts(self) -> list[torch.Tensor]:
        return [c[0][1] for c in self.calls]


class MoeRouting:
    def __init__(self, model: torch.nn.Module):
        self.routers = routers(model)
        # the modeling module of the routers' family: its load_balancing_loss_func
        self.family_module = sys.modules[type(self.routers[0]).__module__] if self.routers else None
        self.num_experts = self.routers[0].num_experts if self.routers else 0
        self.top_k = self.routers[0].top_k if self.routers else 0
        self._given: Optional[torch.Tensor] = None  # (N, L, k) the experts to replay, or None
        self._patched = False

    def __bool__(self) -> bool:
        return bool(self.routers)

    @contextlib.contextmanager
    def recording(self):
        rec = Recording(len(self.routers))

        def hook_for(layer: int):
            def hook(module, args, output):
                rec.calls[layer].append((output[0].detach(), output[2].detach()))
            return hook

        handles = [r.register_forward_hook(hook_for(i)) for i, r in enumerate(self.routers)]
        try:
            yield rec
        finally:
            for h in handles:
                h.remove()

    def replay(self, given: Optional[torch.Tensor]) -> None:
        """Route the next forwards' tokens to `given` (N, L, k) experts (-1: the router's own choice), until
        replay(None). It stays set through the backward, so a recomputed layer (gradient checkpointing) is
        routed as its forward was."""
        self._given = given
        if given is not None and not self._patched:
            for layer, router in enumerate(self.routers):
                router.forward = self._replaying_forward(router, layer)
            self._patched = True

    def _replaying_forward(self, router, layer: int):
        def forward(hidden_states):
            given = None if self._given is None else self._given[:, layer]
            return route(router, hidden_states, given)
        return forward

    def aux_loss(self, rec: Recording, token_mask: Optional[torch.Tensor]) -> torch.Tensor:
        """The router's load-balancing loss of the recorded forward, as the family's model computes it
        (transformers' `load_balancing_loss_func`: E x sum_e f_e P_e over the layers' tokens, f_e the share
        of routed slots that went to expert e, P_e the mean router probability of e; `token_mask` (B, S)
        leaves padding out, None: every token counts)."""
        return self.family_module.load_balancing_loss_func(tuple(rec.logits), self.num_experts, self.top_k,
                                                           token_mask)


def expert_load(experts: list[torch.Tensor], num_experts: int, token_mask: Optional[torch.Tensor] = None):
    """(L, E) share of each layer's routed slots that went to each expert (rows sum to 1); `token_mask` (N,)
    bool keeps real tokens only."""
    rows = []
    for idx in experts:
        if token_mask is not None:
            idx = idx[token_mask.reshape(-1).to(idx.device)]
        counts = torch.bincount(idx.reshape(-1), minlength=num_experts).float()
        rows.append(counts / counts.sum().clamp(min=1))
    return torch.stack(rows)


def load_metrics(load: torch.Tensor) -> dict:
    """moe/expert_load/<e>: the mean over layers of expert e's share; moe/load_max_over_mean: the largest
    expert share over the mean share (1 / E), the worst layer's (1.0: perfectly balanced)."""
    num_experts = load.shape[1]
    out = {f"moe/expert_load/{e}": float(load[:, e].mean()) for e in range(num_experts)}
    out["moe/load_max_over_mean"] = float((load.max(dim=1).values * num_experts).max())
    return out
