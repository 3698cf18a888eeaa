"""Per-token log-probs and entropy of response tokens, without the full logits tensor.

The backbone runs once; the LM head is applied to response positions only, in chunks
of `chunk_size` tokens, so the float32 [batch, length, vocab] tensor is never built.
With gradients on, each chunk is checkpointed: its logits are recomputed in backward
instead of being kept, so peak memory is one chunk of logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from verl.algorithms.entropy import entropy_from_logits


def unwrap_hf(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (LoRA layers stay injected)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def backbone_hidden(model: torch.nn.Module, input_ids, attention_mask, position_ids) -> torch.Tensor:
    """Last hidden states (B, T, H) of a causal LM's trunk."""
    hf = unwrap_hf(model)
    trunk = getattr(hf, hf.base_model_prefix)
    out = trunk(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    return out.last_hidden_state


def _chunk_logp_entropy(hidden, weight, bias, targets, temperature, with_entropy):
    logits = F.linear(hidden, weight, bias).float() / temperature  # (chunk, V)
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if with_entropy:
        return logp, entropy_from_logits(logits)
    return logp, torch.zeros_like(logp)


def response_log_probs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       position_ids: torch.Tensor, response_length: int, temperature: float = 1.0,
                       chunk_size: int = 1024, with_entropy: bool = True):
    """log pi(y_t | x, y_<t) and the policy entropy at each response position.

    input_ids (B, T) with the response in the last R = response_length columns.
    Position P-1+t predicts response token t, so hidden[:, P-1 : T-1] meets the head.
    Returns (log_probs (B, R), entropy (B, R)), float32.
    """
    b, t = input_ids.shape
    hidden = backbone_hidden(model, input_ids, attention_mask, position_ids)
    hidden = hidden[:, t - response_length - 1: t - 1].reshape(b * response_length, -1)
    targets = input_ids[:, t - response_length:].reshape(-1)
    head = unwrap_hf(model).get_output_embeddings()
    weight, bias = head.weight, getattr(head, "bias", None)
    logps, ents = [], []
    for start in range(0, hidden.shape[0], chunk_size):
        args = (hidden[start:start + chunk_size], weight, bias, targets[start:start + chunk_size],
                temperature, with_entropy)
        if torch.is_grad_enabled():
            lp, ent = checkpoint(_chunk_logp_entropy, *args, use_reentrant=False)
        else:
            lp, ent = _chunk_logp_entropy(*args)
        logps.append(lp)
        ents.append(ent)
    return torch.cat(logps).view(b, response_length), torch.cat(ents).view(b, response_length)
