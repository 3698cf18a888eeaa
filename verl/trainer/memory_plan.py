"""Each stage's peak GPU memory, estimated from the config and the model's config.json alone (no
weights load): what `verl plan CONFIG` prints and what `verl train` checks before loading anything
on a CUDA device (verl/trainer/preflight.py).

The figures are what torch's allocator holds in the trainer's process at the stage's peak, the
figure `memory_gb/<stage>` logs (verl/trainer/stage_memory.py), plus an engine's pool where it
lives in another process (SGLang), so that a stage fits when its figure plus the CUDA context
(CONTEXT_BYTES) is at most the card's memory. Notation, in bytes:

    P    the model's parameters        P2  those in matrices (dim >= 2: what autocast casts)
    T    LoRA's trainable parameters (rank r: r x (in + out) per adapted linear layer)
    a    bytes per element of model.dtype (2 for bfloat16/float16, 4 for float32)
    g    rollout.gpu_memory_utilization   M  the card's memory

Held between stages (`held`): full fine-tuning keeps float32 master weights, 4 P, and AdamW's two
float32 moments, 8 P, unless training.offload_optimizer parks them in host memory (they come back
for the update); mixed_precision param_copy adds the model.dtype copy, a P. LoRA keeps the frozen
base in model.dtype, a P, and the adapters with their moments, 12 T. A reference model (KL) is a
frozen copy in model.dtype, a P (none with LoRA: the base with the adapters off), and a separate
critic its float32 weights and moments, 12 P (counted at the actor's shape), unless
training.offload_idle_models. Gradients are freed after each optimizer step.

The stages (each function below says how its figure is formed):

    rollout   held + the engine's pool (`engine_bytes`)
    update    held + gradients + moments brought back + autocast's copies + activations of one
              micro-batch + the LM head's chunk and kept logits (`update_bytes`); the engine's pool
              only where it stays awake for the update (`engine_awake_in_update`)
    sync      held + the engine's pool + one bucket of converted/merged weights (`sync_bytes`)

A run left without training.max_tokens_per_micro_batch derives its token budget from the free
memory with verl/workers/memory_budget.py's conservative estimate; the plan derives it the same
way (`auto_budget`), then counts what that micro-batch holds more closely (`per_token`). A vLLM or
SGLang pool that cannot hold the engine's weights and one sequence (`engine_minimum`) does not
fit either: the engine would not start.

tests/perf/test_memory_preflight.py checks these figures against the per-phase peaks measured on the
H200 (benchmarks/results/h200; docs/performance.md#memory-preflight has the table).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from verl.workers.memory_budget import ModelShape, token_budget

GIB = 1024 ** 3
# Device memory of the CUDA context and the libraries' own (cuBLAS, NCCL) outside torch's
# allocator: a stage fits when its allocator figure plus this is at most the card.
CONTEXT_BYTES = GIB // 2
# Cards by name for planning away from the GPU: torch.cuda.get_device_properties(0).total_memory
# as the benchmarks record it (benchmarks/results/h200/*.json gpu_memory_gib: 139.8).
CARDS_GIB = {"h100": 79.1, "h200": 139.8, "a100-80": 79.1, "a100-40": 39.4, "l40s": 44.4, "a10g": 22.0,
             "4090": 23.6}
SYNC_BUCKET_BYTES = 1 << 30  # verl/rollout/hf_weights.py's SYNC_BUCKET_BYTES (not imported: that pulls torch's engines)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """What the estimate needs of a model, read from its config (no weights)."""

    params: int  # P
    matrix_params: int  # P2
    lora_width: int  # sum of (in + out) over the linear layers LoRA adapts: T = rank x lora_width
    largest_matrix: int  # elements of the largest weight (a sync bucket holds at least it)
    shape: ModelShape  # hidden, layers, intermediate, vocab (memory_budget's)
    kv_per_token: int  # elements of K and V per token over all layers: 2 x L x kv_heads x head_dim


@dataclasses.dataclass
class Stage:
    """One stage's estimated peak, bytes by part."""

    name: str
    weights: int = 0
    grads: int = 0
    optimizer: int = 0
    activations: int = 0
    logits: int = 0
    engine: int = 0  # the rollout engine's pool (weights + KV cache), or the HF rollout's KV cache
    other: int = 0  # autocast's copies, a sync bucket, the reference

    @property
    def total(self) -> int:
        return (self.weights + self.grads + self.optimizer + self.activations + self.logits + self.engine
                + self.other)


@dataclasses.dataclass
class Plan:
    """The estimate of a config on a card: its stages, and what was assumed."""

    card_bytes: int
    card_name: str
    stages: list
    micro_tokens: int  # tokens of the update's largest micro-batch
    budget_key: str  # the key that sets it, or how it was derived
    notes: list = dataclasses.field(default_factory=list)
    kv_needed: int = 0  # the whole batch's KV cache (vLLM: compared with its pool)
    engine_needs: int = 0  # vLLM / SGLang: the least pool the engine starts with (`engine_minimum`)

    @property
    def limit(self) -> int:
        return self.card_bytes - CONTEXT_BYTES

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    @property
    def peak(self) -> Stage:
        return max(self.stages, key=lambda s: s.total)

    @property
    def engine_short(self) -> bool:
        """The engine's pool cannot hold its weights and one sequence (the engine would not start)."""
        return self.engine_needs > self.stage("rollout").engine

    @property
    def fits(self) -> bool:
        return self.peak.total <= self.limit and not self.engine_short


def gib(n: int) -> str:
    return f"{n / GIB:.1f}"


def card_bytes(spec: str) -> tuple[int, str]:
    """`--card NAME|GB` -> (bytes, the name to print): a name of CARDS_GIB or a number of GiB."""
    name = str(spec).strip().lower()
    if name in CARDS_GIB:
        return int(CARDS_GIB[name] * GIB), f"{name} ({CARDS_GIB[name]} GiB)"
    try:
        value = float(name.removesuffix("gib").removesuffix("gb"))
    except ValueError:
        raise ValueError(f"--card {spec}: not a card name ({', '.join(CARDS_GIB)}) or a number of GiB") from None
    if value <= 0:
        raise ValueError(f"--card {spec}: must be more than 0 GiB")
    return int(value * GIB), f"{value:g} GiB"


# ------------------------------------------------------------------ the model, from its config


def _lora_targets(target_modules) -> Optional[set]:
    """None: all linear layers (peft's "all-linear", the LM head excepted); else the names."""
    if target_modules in (None, "all-linear"):
        return None
    return {target_modules} if isinstance(target_modules, str) else set(target_modules)


def model_facts(hf_config, target_modules="all-linear", exclude_modules=None) -> ModelFacts:
    """ModelFacts of a transformers config, counted on the meta device (a model with no storage:
    the exact parameter count and every linear layer's shape, in about a second for 32B)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    params = {id(p): p for p in model.parameters()}.values()  # tied embeddings once
    total = sum(p.numel() for p in params)
    matrices = sum(p.numel() for p in params if p.dim() >= 2)
    largest = max(p.numel() for p in params)
    # (in + out) of every linear layer LoRA would adapt, counted with LoRA off too (the refusal may suggest it)
    lora = 0
    targets = _lora_targets(target_modules)
    excluded = re.compile(exclude_modules) if isinstance(exclude_modules, str) else None
    excluded_names = set(exclude_modules) if isinstance(exclude_modules, (list, tuple)) else set()
    out_emb = model.get_output_embeddings()
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or module is out_emb:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if targets is not None and leaf not in targets and name not in targets:
            continue
        if (excluded is not None and excluded.fullmatch(name)) or leaf in excluded_names or name in excluded_names:
            continue
        lora += module.in_features + module.out_features
    c = hf_config.get_text_config()
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    return ModelFacts(total, matrices, lora, largest, ModelShape.of(hf_config, lm_head=True),
                      2 * c.num_hidden_layers * kv_heads * head_dim)


def read_hf_config(model_cfg):
    """The model's transformers config from its config.json (model.override_config applied): a
    local folder, tiny:<arch>, a fetched short name or a hub name in the local cache."""
    from transformers import AutoConfig

    from verl.models.loading import model_path, override_config

    path = model_path(model_cfg.name, "model.name")
    kwargs = {"trust_remote_code": model_cfg.trust_remote_code}
    if model_cfg.gguf_file:
        kwargs["gguf_file"] = model_cfg.gguf_file
    config = AutoConfig.from_pretrained(path, **kwargs)
    return override_config(config, model_cfg.override_config) if model_cfg.override_config else config


# ------------------------------------------------------------------ the stages


@dataclasses.dataclass(frozen=True)
class Work:
    """The settings of a config the estimate reads (`Work.of(config)`), in one place."""

    dtype: str  # model.dtype, resolved
    lora_rank: int  # model.lora.rank (0: full fine-tuning)
    mixed_precision: str  # autocast | param_copy | pure
    offload_optimizer: bool
    offload_idle_models: bool
    kl: bool  # the algorithm keeps a reference model (KL in the reward or the loss)
    critic: bool  # a separate value model (GAE without critic.share_actor)
    checkpointing: bool
    compiled: bool  # model.torch_compile
    keep_logits: bool
    chunk_size: int
    engine: str  # vllm | sglang | hf
    hf_copy: bool  # rollout.hf_weight_copy: the HF engine's own model.dtype copy of the actor
    gpu_memory_utilization: float
    sleep: bool  # the engine can release its pool (vLLM/SGLang, rollout.enable_sleep_mode)
    sleep_when: str
    sequences: int  # per step: training.batch_size x rollout.n
    mini_batch: int  # sequences per optimizer step
    micro_batch: int  # training.micro_batch_size
    max_tokens: Optional[int]  # training.max_tokens_per_micro_batch
    prompt_tokens: int  # per sequence (data.max_prompt_length unless told the real mean)
    response_tokens: int  # rollout.response_budget

    @classmethod
    def of(cls, cfg, prompt_tokens: Optional[int] = None) -> "Work":
        from verl.algorithms.requirements import needs_critic, needs_reference

        m, t, r = cfg.model, cfg.training, cfg.rollout
        return cls(dtype=m.dtype if m.dtype != "auto" else "bfloat16", lora_rank=m.lora.rank,
                   mixed_precision=m.mixed_precision if m.mixed_precision != "auto" else "autocast",
                   offload_optimizer=t.offload_optimizer, offload_idle_models=t.offload_idle_models,
                   kl=needs_reference(cfg.algorithm),
                   critic=needs_critic(cfg.algorithm) and not cfg.critic.share_actor,
                   checkpointing=m.enable_gradient_checkpointing, compiled=bool(m.torch_compile), keep_logits=bool(t.logprob_keep_logits),
                   chunk_size=t.logprob_chunk_size, engine=r.name if r.name != "auto" else "hf",
                   hf_copy=r.name == "hf" and r.hf_weight_copy,
                   gpu_memory_utilization=r.gpu_memory_utilization,
                   # asynchronous training generates while the trainer updates: the engine never sleeps
                   sleep=r.enable_sleep_mode and r.name in ("vllm", "sglang") and not cfg.async_training.enable,
                   sleep_when=r.sleep_when,
                   sequences=t.batch_size * (r.n or 1), mini_batch=t.mini_batch_size or t.batch_size * (r.n or 1),
                   micro_batch=t.micro_batch_size or 4, max_tokens=t.max_tokens_per_micro_batch,
                   prompt_tokens=cfg.data.max_prompt_length if prompt_tokens is None else prompt_tokens,
                   response_tokens=r.response_budget)

    @property
    def lora(self) -> bool:
        return self.lora_rank > 0

    @property
    def reference(self) -> bool:
        """A frozen reference copy on the device: KL with full fine-tuning (LoRA's is the base)."""
        return self.kl and not self.lora

    def lora_params(self, f: ModelFacts) -> int:
        """T: rank x the adapted layers' (in + out)."""
        return self.lora_rank * f.lora_width

    @property
    def a(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def seq_tokens(self) -> int:
        return self.prompt_tokens + self.response_tokens


def held_bytes(f: ModelFacts, w: Work, first_step: bool = False) -> Stage:
    """What stays on the device between stages (the module docstring): weights, AdamW moments
    (none before the first step, none on the device with training.offload_optimizer) and the
    reference. LoRA: a P + 4 T weights, 8 T moments; full: 4 P (+ a P with param_copy), 8 P."""
    s = Stage("held")
    if w.lora:
        s.weights = w.a * f.params + 4 * w.lora_params(f)
        s.optimizer = 0 if first_step or w.offload_optimizer else 8 * w.lora_params(f)
    elif w.mixed_precision == "pure":  # the weights and AdamW's two moments in model.dtype, no float32 master
        s.weights = w.a * f.params
        s.optimizer = 0 if first_step or w.offload_optimizer else 2 * w.a * f.params
    else:
        s.weights = 4 * f.params + (w.a * f.params if w.mixed_precision == "param_copy" and w.a < 4 else 0)
        s.optimizer = 0 if first_step or w.offload_optimizer else 8 * f.params
    if w.reference and not w.offload_idle_models:
        s.other = w.a * f.params
    if w.hf_copy:  # the HF engine's own model.dtype copy (rollout.hf_weight_copy)
        s.other += w.a * f.params
    if w.critic and not w.offload_idle_models:  # counted as the actor's shape: float32 weights and moments
        s.other += 12 * f.params
    return s


def engine_bytes(f: ModelFacts, w: Work, card: int) -> int:
    """The rollout engine's memory while it generates. vLLM and SGLang: their pool, g x M (vLLM
    sizes weights + activations + KV cache to gpu_memory_utilization of the card's memory; the
    measured pools were 67-70 GiB at g = 0.5 on the 139.8 GiB H200). The Hugging Face engine
    generates with the actor's own weights (or with rollout.hf_weight_copy its copy in model.dtype,
    counted in `held_bytes`: it stays through every stage): the batch's KV cache, sequences x
    (prompt + response) x 2 L kv_heads head_dim x a, and one step's float32 logits, sequences x V x 4."""
    if w.engine in ("vllm", "sglang"):
        return int(w.gpu_memory_utilization * card)
    return kv_bytes(f, w) + w.sequences * f.shape.vocab * 4


ENGINE_WORKSPACE_BYTES = GIB  # the engine's own activations and CUDA graphs beside weights and KV cache


def engine_minimum(f: ModelFacts, w: Work) -> int:
    """The least pool a vLLM / SGLang engine starts with: its weights in model.dtype, a P, one
    sequence's KV cache and ENGINE_WORKSPACE_BYTES; 0 for the Hugging Face engine (no pool)."""
    if w.engine not in ("vllm", "sglang"):
        return 0
    return w.a * f.params + w.seq_tokens * f.kv_per_token * w.a + ENGINE_WORKSPACE_BYTES


def kv_bytes(f: ModelFacts, w: Work) -> int:
    """The whole step's KV cache: sequences x (prompt + response) tokens x 2 L kv_heads head_dim x a."""
    return w.sequences * w.seq_tokens * f.kv_per_token * w.a


def update_fixed(f: ModelFacts, w: Work, first_step: bool = False) -> Stage:
    """The update's memory besides activations and the head: held, plus float32 gradients of the
    trained parameters (4 P, or 4 T with LoRA; param_copy adds the copy's own, a P), the moments
    (8 P) on the device (back from the host with offloading; allocated by the first step), and
    under autocast a model.dtype copy of every float32 matrix, a P2 (cast once per forward, kept
    for the backward; the LoRA adapters' a T)."""
    s = held_bytes(f, w, first_step)
    trained = w.lora_params(f) if w.lora else f.params
    s.name = "update"
    if not w.lora and w.mixed_precision == "pure":  # model.dtype gradients and moments
        s.grads, s.optimizer = w.a * f.params, 2 * w.a * f.params
        return s
    s.grads = 4 * trained + (w.a * f.params if not w.lora and w.mixed_precision == "param_copy" and w.a < 4 else 0)
    s.optimizer = 8 * trained
    if w.a < 4 and (w.lora or w.mixed_precision == "autocast"):
        s.other += w.a * (w.lora_params(f) if w.lora else f.matrix_params)
    return s


def head_bytes(f: ModelFacts, w: Work) -> int:
    """The chunked LM head: C x V x (a + 12), logits of training.logprob_chunk_size tokens in the
    matmul dtype and three float32 temporaries (memory_budget's head)."""
    return w.chunk_size * f.shape.vocab * (w.a + 12)


def per_token(f: ModelFacts, w: Work) -> int:
    """Activation bytes per token the update's backward keeps. memory_budget's estimate is the
    conservative one a run sizes its token budget with (`auto_budget`); this is the memory that
    budget then holds, with the same layout counted closer (grouped K/V, the compute dtype's
    residual stream, what torch.compile saves):

        layer     = a (6 H + 2 KV + m I) + r H
                    6 H: the two norm outputs, q, the attention output and the projections'
                    inputs; 2 KV: k and v (kv_heads x head_dim each, grouped-query attention);
                    m I: the gated MLP's gate, up, activation and product (m = 4), of which a
                    compiled layer (model.torch_compile) keeps gate and up and recomputes the
                    pointwise rest in the backward (m = 2); r H: the residual stream and norm
                    statistics, 4 vectors in float32 (r = 16) under autocast, in model.dtype
                    with param_copy or pure (r = 4 a)
        per token = (L + 1) layer, or L x 4 H + 2 layer with gradient checkpointing (each
                    layer's float32 input kept, one layer recomputed with its backward)

    Kept logits (training.logprob_keep_logits) are counted apart, per response token
    (`kept_logits_bytes`)."""
    s = f.shape
    kv = f.kv_per_token // (2 * s.layers)
    residual = 4 * w.a if w.mixed_precision in ("param_copy", "pure") and not w.lora else 16
    layer = w.a * (6 * s.hidden + 2 * kv + (2 if w.compiled else 4) * s.intermediate) + residual * s.hidden
    return s.layers * 4 * s.hidden + 2 * layer if w.checkpointing else (s.layers + 1) * layer


def kept_logits_bytes(f: ModelFacts, w: Work, tokens: int) -> int:
    """With training.logprob_keep_logits the update keeps the response tokens' logits for the
    backward: a x V per response token, R / (P + R) of the micro-batch's tokens."""
    if not w.keep_logits:
        return 0
    return w.a * f.shape.vocab * tokens * w.response_tokens // w.seq_tokens


def auto_budget(f: ModelFacts, w: Work, card: int, engine_awake: bool) -> int:
    """The token budget a run derives at its first update (memory_budget.token_budget): from
    available = M - CONTEXT - held before the first step - (the engine's pool if awake), and
    pending = what the first update still allocates (gradients, moments, autocast's copies)."""
    held = held_bytes(f, w, first_step=True).total
    fixed = update_fixed(f, w, first_step=True).total
    available = card - CONTEXT_BYTES - held - (engine_bytes(f, w, card) if engine_awake else 0)
    return token_budget(max(0, available), fixed - held, f.shape, w.a, training=True,
                        checkpointing=w.checkpointing, chunk_size=w.chunk_size, keep_logits=w.keep_logits)


def micro_tokens(f: ModelFacts, w: Work, card: int, cuda: bool, engine_awake: bool) -> tuple[int, str]:
    """(tokens of the update's largest micro-batch, where that comes from): the mini-batch's
    tokens (mini_batch x (prompt + response)) cut by training.max_tokens_per_micro_batch, or on a
    CUDA device without it by the derived budget, or else by training.micro_batch_size
    sequences; never less than one sequence (a longer one is a micro-batch of its own)."""
    mini = w.mini_batch * w.seq_tokens
    if w.max_tokens:
        limit, where = w.max_tokens, "training.max_tokens_per_micro_batch"
    elif cuda:
        limit = auto_budget(f, w, card, engine_awake)
        where = (f"training.max_tokens_per_micro_batch unset: a budget of {limit} tokens derived from the free "
                 "memory, at least one sequence")
    else:
        limit, where = w.micro_batch * w.seq_tokens, "training.micro_batch_size"
    return max(min(limit, mini), w.seq_tokens), where


def engine_awake_in_update(f: ModelFacts, w: Work, card: int) -> bool:
    """Whether the engine keeps its pool through the update: without a sleep mode, or with
    rollout.sleep_when: needed where the mini-batch fits one micro-batch beside the awake engine
    (verl/trainer/sleep_policy.py; with a set token budget the engine sleeps, as there)."""
    if not w.sleep:
        return True
    if w.sleep_when != "needed" or w.max_tokens:
        return False
    return auto_budget(f, w, card, engine_awake=True) >= w.mini_batch * w.seq_tokens


def update_bytes(f: ModelFacts, w: Work, tokens: int, engine: int) -> Stage:
    """update_fixed + activations (per_token x tokens) + the head + the engine's pool if awake
    (an SGLang pool lives in its own process: counted here all the same, as it takes the card)."""
    s = update_fixed(f, w)
    s.activations = per_token(f, w) * tokens
    s.logits = head_bytes(f, w) + kept_logits_bytes(f, w, tokens)
    s.engine = engine
    return s


def sync_bytes(f: ModelFacts, w: Work, card: int) -> Stage:
    """held + the engine's pool (awake to take the weights) + one bucket of weights in model.dtype
    being converted or merged (W + B A for LoRA): SYNC_BUCKET_BYTES, or the largest weight alone.
    The Hugging Face engine generates with the actor's weights: nothing to sync."""
    s = held_bytes(f, w)
    s.name = "sync"
    if w.engine in ("vllm", "sglang"):
        s.engine = engine_bytes(f, w, card)
        s.other += max(SYNC_BUCKET_BYTES, f.largest_matrix * w.a)
    return s


def plan(f: ModelFacts, w: Work, card: int, card_name: str, cuda: bool = True) -> Plan:
    """The three stages of a step on a card of `card` bytes."""
    rollout = held_bytes(f, w)
    rollout.name = "rollout"
    rollout.engine = engine_bytes(f, w, card)
    awake = engine_awake_in_update(f, w, card)
    tokens, where = micro_tokens(f, w, card, cuda, awake)
    update = update_bytes(f, w, tokens, engine_bytes(f, w, card) if awake else 0)
    out = Plan(card, card_name, [rollout, update, sync_bytes(f, w, card)], tokens, where, kv_needed=kv_bytes(f, w),
               engine_needs=engine_minimum(f, w))
    if w.engine in ("vllm", "sglang"):
        out.notes.append(f"the engine's pool is rollout.gpu_memory_utilization {w.gpu_memory_utilization} x the card"
                         + ("; it sleeps for the update" if not awake else "; it stays awake for the update"))
        weights = w.a * f.params
        room = rollout.engine - weights
        if out.engine_short:
            out.notes.append(f"the engine's weights ({gib(weights)} GiB) and one sequence do not fit its pool "
                             f"({gib(rollout.engine)} GiB): it would not start")
        elif room < kv_bytes(f, w):
            out.notes.append(f"the step's KV cache ({gib(kv_bytes(f, w))} GiB) is more than the pool leaves beside "
                             f"the weights ({gib(max(0, room))} GiB): the engine decodes in waves")
    return out


def fixes(f: ModelFacts, w: Work, card: int, cuda: bool = True) -> list[str]:
    """The single changes that make a plan that does not fit fit, in the refusal's order: the
    optimizer offload, LoRA, a smaller token budget (the largest that fits), gradient
    checkpointing, a smaller engine pool."""
    out = []

    def fits(**changes) -> bool:
        return plan(f, dataclasses.replace(w, **changes), card, "", cuda).fits

    if not w.lora and not w.offload_optimizer and fits(offload_optimizer=True):
        out.append("training.offload_optimizer=true")
    if not w.lora and plan(f, dataclasses.replace(w, lora_rank=16, mixed_precision="autocast"), card, "", cuda).fits:
        out.append("model.lora.rank=16")
    tokens = largest_budget(f, w, card, cuda)
    if tokens:
        out.append(f"training.max_tokens_per_micro_batch={tokens}")
    if not w.checkpointing and fits(checkpointing=True):
        out.append("model.enable_gradient_checkpointing=true")
    if w.engine in ("vllm", "sglang"):  # a smaller pool where the card is short, a larger where the engine is
        for g in sorted((0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9), key=lambda g: abs(g - w.gpu_memory_utilization)):
            if g != w.gpu_memory_utilization and fits(gpu_memory_utilization=g):  # the nearest that fits
                out.append(f"rollout.gpu_memory_utilization={g}")
                break
    return out


def largest_budget(f: ModelFacts, w: Work, card: int, cuda: bool = True) -> Optional[int]:
    """The largest training.max_tokens_per_micro_batch (at least one sequence) with which the plan
    fits, or None (none does, or the update is not what is over)."""
    lo, hi = w.seq_tokens, max(w.seq_tokens, w.mini_batch * w.seq_tokens)
    if not plan(f, dataclasses.replace(w, max_tokens=lo), card, "", cuda).fits:
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if plan(f, dataclasses.replace(w, max_tokens=mid), card, "", cuda).fits:
            lo = mid
        else:
            hi = mid - 1
    return lo


def refusal(p: Plan, fix: list[str]) -> str:
    """The one line of a config that does not fit: the peak stage, its parts, and the keys (or
    the engine's pool, where that is what is short)."""
    keys = (": set " + ", or ".join(fix)) if fix else ": no single key makes it fit; see `verl plan`"
    tail = " (training.memory_preflight=false skips this check)"
    if p.engine_short and p.peak.total <= p.limit:
        return (f"memory: the rollout engine needs ~{gib(p.engine_needs)} GiB for its weights and one sequence, "
                f"more than its pool of {gib(p.stage('rollout').engine)} GiB (rollout.gpu_memory_utilization of this "
                f"{gib(p.card_bytes)} GiB card){keys}{tail}")
    s = p.peak
    parts = [f"weights {gib(s.weights)}", f"gradients {gib(s.grads)}", f"optimizer {gib(s.optimizer)}",
             f"activations {gib(s.activations)}", f"logits {gib(s.logits)}"]
    if s.engine:
        parts.append(f"engine {gib(s.engine)}")
    if s.other:
        parts.append(f"other {gib(s.other)}")
    what = {"update": "the update", "rollout": "the rollout", "sync": "the weight sync"}[s.name]
    return (f"memory: {what} needs ~{gib(s.total)} GiB on this {gib(p.card_bytes)} GiB card "
            f"({', '.join(parts)}; {gib(CONTEXT_BYTES)} GiB for the CUDA context){keys}{tail}")


def table(p: Plan) -> str:
    """The stage x part table `verl plan` prints, in GiB."""
    cols = ("weights", "grads", "optimizer", "activations", "logits", "engine", "other", "total")
    rows = [f"{'stage':<8}" + "".join(f"{c:>12}" for c in cols)]
    for s in p.stages:
        values = (s.weights, s.grads, s.optimizer, s.activations, s.logits, s.engine, s.other, s.total)
        rows.append(f"{s.name:<8}" + "".join(f"{gib(v):>12}" for v in values))
    return "\n".join(rows)

