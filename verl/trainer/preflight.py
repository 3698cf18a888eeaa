"""The memory preflight of `verl train`: before any weights load on a CUDA device, the config's
per-stage estimate (verl/trainer/memory_plan.py) against this card.

    check_before_loading(config)   # verl/trainer/launch.py, after the config loads

A config whose estimated peak is more than the card is refused in one line naming the stage, its
parts and the single keys that would make it fit (`MemoryRefused`, exit 2). Where the only excess
is a set training.max_tokens_per_micro_batch, the budget is lowered to the largest that fits, with
a note (left unset, the run derives its own budget from the free memory: verl/workers/memory_budget.py).
Skipped (nothing is estimated) with training.memory_preflight: false, on the CPU, and under
`distributed.backend: ray` (its workers shard the model; the estimate is of one process). An
estimate that cannot be made (a config.json that does not read) is a note, never a refusal.
"""

from __future__ import annotations

from typing import Optional

from verl.trainer import memory_plan


class MemoryRefused(Exception):
    """A config whose estimated peak does not fit the card (bad input: exit 2)."""


def plan_config(config, card: int, card_name: str, prompt_tokens: Optional[int] = None, cuda: bool = True):
    """(Plan, ModelFacts, Work) of a loaded config on a card of `card` bytes, from the model's
    config.json (no weights)."""
    hf = memory_plan.read_hf_config(config.model)
    lora = config.model.lora
    facts = memory_plan.model_facts(hf, lora.target_modules, lora.exclude_modules)
    work = memory_plan.Work.of(config, prompt_tokens)
    return memory_plan.plan(facts, work, card, card_name, cuda), facts, work


def this_card(config) -> Optional[tuple[int, str]]:
    """(bytes, name) of the config's CUDA device, or None where the run is not on one."""
    import torch

    if config.device == "cpu" or not torch.cuda.is_available():
        return None
    device = torch.device("cuda" if config.device == "auto" else config.device)
    props = torch.cuda.get_device_properties(device)
    return int(props.total_memory), props.name


def check_before_loading(config) -> None:
    """Refuse (MemoryRefused) or adjust `config` by its estimate on this card; the module docstring."""
    if not config.training.memory_preflight or config.distributed.backend == "ray":
        return
    card = this_card(config)
    if card is None:
        return
    try:
        p, facts, work = plan_config(config, *card)
    except Exception as exc:  # noqa: BLE001 - the model load that follows reports a bad model itself
        print(f"verl: memory preflight skipped: the model's config did not read ({type(exc).__name__})", flush=True)
        return
    if p.fits:
        return
    budget = memory_plan.largest_budget(facts, work, card[0])
    only_tokens = (work.max_tokens and budget and p.peak.name == "update"
                   and all(s.total <= p.limit for s in p.stages if s.name != "update"))
    if only_tokens:
        config.training.max_tokens_per_micro_batch = budget
        print(f"verl: memory: training.max_tokens_per_micro_batch {work.max_tokens} -> {budget}: the update would "
              f"need ~{memory_plan.gib(p.peak.total)} GiB on this {memory_plan.gib(card[0])} GiB card with "
              f"{work.max_tokens} (training.memory_preflight=false keeps it)", flush=True)
        return
    raise MemoryRefused(memory_plan.refusal(p, memory_plan.fixes(facts, work, card[0])))
