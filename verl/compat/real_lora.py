"""Real verl's LoRA keys -> our `model.lora` section: rows of `verl.compat.real_verl.TABLE`.

Real verl has two LoRA configs in `actor_rollout_ref.model`:

    lora_rank, lora_alpha, target_modules,     its FSDP engine's (peft): the same keys here
    exclude_modules, lora_adapter_path
    lora.*  (rank, alpha, dropout, merge,      its Megatron engine's (Megatron-Bridge), read with
    target_modules, lora_A_init_method, ...)   model_engine=megatron: mapped onto peft here

* `lora_adapter_path` starts from a saved peft adapter (`model.lora.adapter_path`). Real verl's engine calls
  peft's PeftModel.from_pretrained(..., is_trainable=True), which builds the adapter from its own
  adapter_config.json: the line's lora_rank / lora_alpha / target_modules / exclude_modules are not read then,
  nor passed on here (a note names each one given).
* `lora.*`: Megatron's module names become the Hugging Face projections they stand for (MEGATRON_TARGETS:
  linear_qkv -> q_proj, k_proj, v_proj or a fused c_attn / qkv_proj, ...); Megatron's scale alpha / rank is
  peft's. `lora_A_init_method` kaiming is peft's default (kaiming-uniform A); xavier has no peft equivalent
  and is refused, B starts at zero in both. `lora.merge`: the rollout engine gets the merged weights here
  always (real verl's merge=True; merge=False serves the adapter apart in vLLM, the same function).
"""

from __future__ import annotations

from verl.compat.real_engines import engine
from verl.compat.real_keys import (ARR, as_float, as_int, expand_path, ignored, module_names, only, reads, refuse,
                                   to)
from verl.errors import ConfigError

M = f"{ARR}.model"
L = f"{M}.lora"
ADAPTER = f"{M}.lora_adapter_path"
FROM_ADAPTER = ("the adapter's own settings (its adapter_config.json) are used with lora_adapter_path, as real "
                "verl's PeftModel.from_pretrained uses them")

# Megatron's module names (Megatron-Bridge LoRA target_modules) -> the Hugging Face module names of the same
# projections (peft's target_modules: a module whose name is one of these or ends with ".<name>"): Llama / Qwen /
# Mistral names, fused forms (GPT-2's c_attn / c_fc, Phi-3's qkv_proj / gate_up_proj) and DeepSeek's MLA
MEGATRON_TARGETS = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj", "qkv_proj", "c_attn"),
    "linear_q": ("q_proj",), "linear_k": ("k_proj",), "linear_v": ("v_proj",),
    "linear_proj": ("o_proj", "attn.c_proj"),
    "linear_fc1": ("gate_proj", "up_proj", "gate_up_proj", "c_fc"),
    "linear_fc1_gate": ("gate_proj",), "linear_fc1_up": ("up_proj",),
    "linear_fc2": ("down_proj", "mlp.c_proj"),
    "linear_q_proj": ("q_proj",), "linear_q_down_proj": ("q_a_proj",), "linear_q_up_proj": ("q_b_proj",),
    "linear_kv_down_proj": ("kv_a_proj_with_mqa",), "linear_kv_up_proj": ("kv_b_proj",),
}
MEGATRON_DEFAULT_TARGETS = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
FUSED = ("linear_qkv", "linear_fc1")  # Megatron's one adapter over q, k, v (gate, up): one A shared
LORA_TYPES = ("lora", "canonical_lora")
A_INITS = {"kaiming": "kaiming"}  # Megatron's lora_A_init_method -> model.lora.init_lora_weights


def _unless_adapter(entry: dict) -> dict:
    """A flat LoRA key (lora_rank, ...): not read when lora_adapter_path is given (a note names it)."""
    convert = entry["convert"]

    def unless(value, ctx, key):
        if ctx.get(ADAPTER) is not None:
            if ctx.given(key):
                ctx.notes.append(f"ignored {key}={value}: {FROM_ADAPTER}")
            return {}
        return convert(value, ctx, key)

    return {**entry, "convert": unless}


def adapter_path(value, ctx, key):
    return {} if value is None else {"model.lora.adapter_path": expand_path(value)}


def megatron_targets(value, key: str) -> list:
    """Megatron-Bridge target_modules -> peft's, through MEGATRON_TARGETS (a name it lacks is refused)."""
    names = [value] if isinstance(value, str) else list(value or [])
    unknown = [n for n in names if n not in MEGATRON_TARGETS]
    if unknown or not names:
        raise refuse(key, value, f"Megatron module names with no Hugging Face equivalent here ({unknown[0] if unknown else 'none given'}); "
                                 f"known: {', '.join(MEGATRON_TARGETS)}")
    out: list = []
    for n in names:
        out += [m for m in MEGATRON_TARGETS[n] if m not in out]
    return out


def megatron_lora(value, ctx, key):
    """lora.rank > 0 (model_engine=megatron): the Megatron-Bridge LoRA as peft's, with lora.*'s other keys."""
    rank = as_int(value, key, low=0)
    if rank == 0:
        return {}
    if engine(ctx) != "megatron":
        raise ConfigError(f"real verl's {key} is read by its Megatron engine only (its FSDP engine reads "
                          f"{M}.lora_rank): give model_engine=megatron (or --config-name=ppo_megatron_trainer), "
                          f"or {M}.lora_rank")
    kind = ctx.get(f"{L}.type")
    if kind not in LORA_TYPES:
        raise refuse(f"{L}.type", kind, "Megatron-Bridge's DoRA and vision-language LoRA; lora and canonical_lora "
                                        "are accepted")
    init = ctx.get(f"{L}.lora_A_init_method")
    if init not in A_INITS:
        raise refuse(f"{L}.lora_A_init_method", init, f"Megatron-Bridge's {init} initialisation of A has no peft "
                                                      "equivalent (peft starts A kaiming-uniform or gaussian); "
                                                      "kaiming (peft's default) is accepted")
    targets = ctx.get(f"{L}.target_modules")
    out = {"model.lora.rank": rank, "model.lora.alpha": as_float(ctx.get(f"{L}.alpha"), f"{L}.alpha"),
           "model.lora.dropout": as_float(ctx.get(f"{L}.dropout"), f"{L}.dropout"),
           "model.lora.target_modules": megatron_targets(targets, f"{L}.target_modules"),
           "model.lora.init_lora_weights": A_INITS[init]}
    if ctx.get(f"{L}.adapter_path") is not None:
        out["model.lora.adapter_path"] = expand_path(ctx.get(f"{L}.adapter_path"))
    fused = [n for n in ([targets] if isinstance(targets, str) else targets) if n in FUSED]
    if kind == "lora" and fused:
        ctx.notes.append(f"{L}.type=lora: Megatron-Bridge's adapter on its fused {' and '.join(fused)} shares one A "
                         f"across the projections it fuses (q, k, v; gate, up); here each Hugging Face projection "
                         f"has its own A and B (Megatron's canonical_lora), with the same rank and alpha / rank")
    return out


_MEGATRON_READ = "read with lora.rank"

ENTRIES: list = [
    # ---- the FSDP engine's (peft) keys
    (f"{M}.lora_rank", _unless_adapter(to("model.lora.rank", as_int))),
    (f"{M}.lora_alpha", _unless_adapter(to("model.lora.alpha", as_float))),
    (f"{M}.target_modules", _unless_adapter(to("model.lora.target_modules"))),
    (f"{M}.exclude_modules", _unless_adapter(to(
        "model.lora.exclude_modules", module_names,
        note="peft's exclude_modules, as real verl's FSDP engine passes it: a regex of whole names or a list of "
             "names; not given, all-linear skips a vision-language model's tower here (real verl adapts it)"))),
    (ADAPTER, dict(convert=adapter_path, target="model.lora.adapter_path",
                   note="a saved peft adapter to train further; its own rank, alpha and targets are used (the "
                        "line's lora_rank, lora_alpha, target_modules are not read, as in real verl)")),
    # ---- the Megatron engine's (Megatron-Bridge) lora section
    (f"{L}.rank", dict(convert=megatron_lora, target="model.lora.* (rank, alpha, dropout, targets, init)",
                       default=0, note="with model_engine=megatron; Megatron's module names mapped to the Hugging "
                                       "Face ones; its fused qkv / fc1 adapters become one per projection")),
    (f"{L}.alpha", reads(f"model.lora.alpha, {_MEGATRON_READ}", default=32)),
    (f"{L}.dropout", reads(f"model.lora.dropout, {_MEGATRON_READ}", default=0.0)),
    (f"{L}.type", reads(f"{_MEGATRON_READ}: lora | canonical_lora", default="lora")),
    (f"{L}.target_modules", reads(f"model.lora.target_modules, {_MEGATRON_READ}", default=MEGATRON_DEFAULT_TARGETS,
                                  note="linear_qkv, linear_proj, linear_fc1, linear_fc2 (and canonical / MLA names) "
                                       "-> their Hugging Face projections")),
    (f"{L}.lora_A_init_method", reads(f"model.lora.init_lora_weights, {_MEGATRON_READ}", default="xavier",
                                      note="kaiming (peft's default); xavier is refused")),
    (f"{L}.lora_B_init_method", only("zero", why="B starting other than at zero")),
    (f"{L}.dropout_position", only("pre", why="dropout after the low-rank projection (peft drops out its input)")),
    (f"{L}.exclude_modules", only([], None, why="Megatron's exclusion by module name; give target_modules")),
    (f"{L}.adapter_path", reads(f"model.lora.adapter_path, {_MEGATRON_READ}", default=None)),
    (f"{L}.merge", ignored("the rollout engine always gets the merged weights W + (alpha/rank) B A here (real "
                           "verl's merge=True); merge=False serves the adapter apart in real verl's vLLM: the same "
                           "function, other rounding")),
    (f"{L}.dtype", ignored("the adapters train in float32 here (Megatron keeps a float32 master copy of them)")),
    (f"{L}.a2a_experimental", ignored("Megatron's all-to-all communication: engine internals")),
    (f"{L}.*", ignored("used with lora.type=vlm_lora only")),
]
