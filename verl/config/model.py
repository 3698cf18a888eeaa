"""`model` section: the policy's weights, precision and attention, and its LoRA adapters."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from verl.config.keys import Section, derived, key
from verl.errors import ConfigError



@dataclass
class LoraConfig(Section):
    SECTION = "model.lora"
    rank: int = key(0, ge=0)  # 0 = LoRA off
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: Any = "all-linear"  # "all-linear" or a list of module names
    # modules that get no adapter, as peft's exclude_modules (real verl's actor_rollout_ref.model.exclude_modules):
    # a regex the whole module name matches (e.g. ".*visual.*": none in a Qwen-VL vision tower) or a list of
    # names, each the module's name or its last parts; None: none excluded
    exclude_modules: Any = None
    # How A starts (B starts at zero, so training starts from the base model): kaiming (peft's default,
    # kaiming-uniform; Megatron's lora_A_init_method kaiming) | gaussian (normal, std 1/rank)
    init_lora_weights: str = key("kaiming", choices=("kaiming", "gaussian"))
    # Parameters adapted as tensors (peft's target_parameters, LoRA per expert on a mixture-of-experts layer's
    # fused experts, (E, in, out)): auto = with target_modules all-linear, an MoE model's expert projections and
    # routers, as all-linear adapts every linear map of a dense model (docs/moe.md); or a list of parameter
    # names (mlp.experts.gate_up_proj, ...). peft itself maps a target_modules list's gate_proj / up_proj /
    # down_proj (w1 / w3 / w2) onto the fused experts of the families it converts
    target_parameters: Any = "auto"
    # A saved peft adapter folder (adapter_config.json + weights) to start from, its weights trained further
    # (real verl's actor_rollout_ref.model.lora_adapter_path). Its own rank / alpha / dropout / targets are
    # used: keys above left at their defaults take them, others must equal them (verl/models/lora_adapter.py)
    adapter_path: Optional[str] = None
    # Adapted linear layers computed by verl's fused forward (verl/models/lora_fused.py): the adapters' sum
    # folded into the base matmul, no float32 copies of the activations; the same values to rounding. Calls
    # it cannot take (dropout > 0, adapters disabled or merged) go through peft's. On by default: at the 7B
    # LoRA update on an H100 it is 1.19x peft's forward, with 3 GiB less peak memory
    # (benchmarks/results/h100/lora_fused_2026-12-08). false: peft's forward
    fused: bool = key(True, resume_safe=True)

    def validate(self, path: str) -> None:
        tp = self.target_parameters
        if not (tp == "auto" or (isinstance(tp, (list, tuple)) and all(isinstance(n, str) for n in tp))):
            raise ConfigError(f"{path}.target_parameters: {tp!r}: auto, or a list of parameter names "
                              f"(e.g. [mlp.experts.gate_up_proj, mlp.experts.down_proj])")
        if self.adapter_path is not None:
            from verl.models.lora_adapter import adopt, read_adapter

            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            adopt(self, read_adapter(self.adapter_path, f"{path}.adapter_path"), path, defaults)


@dataclass
class ModelConfig(Section):
    SECTION = "model"
    type: str = key("huggingface", choices=("huggingface",))
    # Hub name, local directory, or "tiny:<arch>" (a small random model built locally;
    # arch in gpt2|llama|qwen2, or the vision-language qwen2_5_vl|llava: docs/vision_language.md)
    # -- the embedded default that runs with no downloads.
    name: str = "tiny:gpt2"
    tokenizer: Optional[str] = None  # defaults to `name`
    gguf_file: Optional[str] = None  # a .gguf file inside `name` (or an absolute path)
    # Fields of the model's config.json replaced at load, e.g. {max_position_embeddings: 32768} or a
    # rope_scaling (real verl's actor_rollout_ref.model.override_config): the actor, its reference and the
    # rollout engine (which then starts from an exported folder with the same config) all see them
    override_config: dict = key(factory=dict)
    # The compute dtype of the trained copy (master weights stay float32; see mixed_precision) and the
    # engine's dtype. auto: bfloat16 on a CUDA device that supports it (what real verl and TRL compute
    # in), float32 elsewhere (the CPU, where bf16 matmuls are slower and rounding hurts tiny models).
    dtype: str = key("auto", choices="verl.models.loading:DTYPE_CHOICES")
    dtype_note: str = derived("")  # what dtype auto chose, on a GPU (logged; verl/config/auto.py)
    use_flash_attention: bool = key(False, resume_safe=True)  # flash_attention_2 when installed, else an error
    # auto | sdpa | eager | flash_attention_2. auto: PyTorch SDPA, except eager attention for
    # bfloat16/float16 on the CPU, where SDPA's flash backward is ~2.5x slower than eager's matmuls
    attn_implementation: str = key("auto", choices=("auto", "sdpa", "eager", "flash_attention_2"), resume_safe=True)
    trust_remote_code: bool = key(False, resume_safe=True)
    enable_gradient_checkpointing: bool = key(False, resume_safe=True)
    # torch.compile the decoder layers for training forwards/backwards (fuses norms, rotary,
    # activations; the first steps pay the compile time). Generation stays eager. None = auto:
    # on for the single-process actor on a CUDA device (full fine-tuning, or LoRA with model.lora.fused);
    # off for LoRA on peft's own layers, on the CPU and under Ray (verl.config.auto._resolve_update_speedups).
    torch_compile: Optional[bool] = key(None, resume_safe=True)
    # How a bfloat16/float16 model.dtype trains full fine-tuning (master weights stay float32):
    # autocast (casts each weight at each matmul; float32 residual stream) | param_copy (forward
    # and backward on a model.dtype copy of the weights, gradients summed in float32, as FSDP and
    # DeepSpeed mixed precision do: fewer casts, half the residual-stream traffic). The actor, in
    # one process (a separate critic keeps autocast); the sharded actor always computes in
    # model.dtype (FSDP's MixedPrecisionPolicy). auto: param_copy for full fine-tuning in bf16/fp16
    # on a CUDA device in one process, unless training.offload_optimizer (the copy's 2 bytes per
    # parameter stay through the optimizer step that offloading makes room for); autocast elsewhere.
    # pure: no float32 master copy -- the trained weights themselves are model.dtype, and AdamW steps them
    # (its moments in model.dtype too): 8 bytes a parameter instead of 16, and every update rounded to
    # model.dtype (real verl's fsdp_config.model_dtype=bfloat16). Never chosen by auto.
    mixed_precision: str = key("auto", choices=("auto", "autocast", "param_copy", "pure"))
    lora: LoraConfig = key(factory=LoraConfig)
    # A vision-language model's vision tower (and its projector) is not trained: requires_grad off, not in
    # the optimizer (real verl's actor.freeze_vision_tower). With LoRA the tower never gets adapters anyway.
    freeze_vision_tower: bool = False

    def validate(self, path: str) -> None:
        if self.override_config and self.gguf_file:
            raise ConfigError(f"{path}.override_config: not with {path}.gguf_file (the GGUF file fixes its config)")
        if self.use_flash_attention and self.attn_implementation not in ("auto", "flash_attention_2"):
            raise ConfigError(f"{path}.use_flash_attention: true contradicts {path}.attn_implementation: "
                              f"{self.attn_implementation}; keep one of them")
        if self.mixed_precision in ("param_copy", "pure"):
            mode = self.mixed_precision
            if self.dtype not in ("bfloat16", "float16", "auto"):  # auto: checked again once resolved
                raise ConfigError(f"{path}.mixed_precision: {mode} computes in model.dtype, which is "
                                  f"{self.dtype}; set model.dtype: bfloat16 (or mixed_precision: autocast)")
            if self.lora.rank > 0:
                raise ConfigError(f"{path}.mixed_precision: {mode} is for full fine-tuning; with "
                                  "model.lora.rank > 0 the frozen base already runs in model.dtype (set "
                                  "mixed_precision: autocast)")
