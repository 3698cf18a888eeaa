"""Helpers the MoE tests of several files share."""

from __future__ import annotations

import dataclasses

import torch


def padded_and_packed_log_probs(trainer, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The actor's log-probs of `batch` with padded micro-batches, then with packed ones (the actor is left
    packing)."""
    from verl.workers.packing import causal_lm_trunk, prepare_packing

    actor = trainer.actor
    padded = actor.compute_log_probs(batch)[0]
    actor.micro = dataclasses.replace(actor.micro, packed=True)
    actor.packing_mode = prepare_packing(causal_lm_trunk(actor.model))
    return padded, actor.compute_log_probs(batch)[0]
