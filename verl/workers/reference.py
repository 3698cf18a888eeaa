"""Reference policy: frozen log-probs of the starting policy, for the KL term.

Built only when the algorithm uses KL (in the reward or as a loss). Without LoRA it is a
frozen copy of the actor at step 0, stored in `model.dtype` (no master weights, no
gradients), kept on the CPU between uses with `training.offload_idle_models`. With LoRA
the starting policy is the actor's base model, so the reference is the actor's own module
with its adapters disabled: no second copy in memory.

    Reference.from_config(config, device, actor_model)   reference.compute_log_probs(batch)
"""

from __future__ import annotations

import torch

from verl.batch import Batch
from verl.models.loading import torch_dtype
from verl.models.lora import adapters_disabled, base_model, is_peft_model
from verl.workers.compile import CompiledLayers
from verl.workers.logprobs import response_log_probs
from verl.workers.awake_budget import AwakeBudget
from verl.workers.memory_budget import TokenBudget, pending_bytes
from verl.workers.micro_batches import MicroBatching, on_device, pad_response_columns
from verl.workers.offload import IdleOffload
from verl.workers.packing import causal_lm_trunk
from verl.workers.param_copy import cast_module_copy


def frozen_copy(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """A deep copy in eval mode without gradients whose parameters are created directly on
    `device` in `dtype` (never two full-precision copies on one device); buffers keep
    their dtype (`verl.workers.param_copy.cast_module_copy`)."""
    return cast_module_copy(model, device, dtype, trainable=False).eval()


class Reference(AwakeBudget):
    ROLE = "reference"  # the name its micro-batching and memory budget report under

    def __init__(self, model_cfg, training_cfg, device: torch.device, actor_model: torch.nn.Module,
                 micro: MicroBatching, *, temperature: float = 1.0, adapt_to_memory: bool = True,
                 frozen: bool = False, offload: bool | None = None, compute_dtype: torch.dtype | None = None):
        """model_cfg, training_cfg: the config's model and training sections; actor_model: the
        actor's module at step 0 (copied, or shared with its LoRA adapters off); temperature:
        the sampling temperature. adapt_to_memory as for `Actor`. frozen: `actor_model` is already a
        frozen module of its own (a teacher, verl/workers/teacher.py), used as it is, kept in host memory
        between uses when `offload` (default training.offload_idle_models) and run in `compute_dtype`."""
        self.training = training_cfg
        self.device = device
        self.micro = micro
        self.compute_dtype = compute_dtype or torch_dtype(model_cfg.dtype)
        self.shares_actor = not frozen and is_peft_model(actor_model)
        offload = (training_cfg.offload_idle_models if offload is None else offload) and not self.shares_actor
        if self.shares_actor or frozen:
            self.model = actor_model
        else:  # straight to host memory when it idles there (no transient second copy on the GPU)
            self.model = frozen_copy(actor_model, torch.device("cpu") if offload else device, self.compute_dtype)
        self.temperature = temperature
        self.fused = model_cfg.torch_compile
        self.packing_mode, self.micro = micro.with_packing(causal_lm_trunk(self.model), self.ROLE)
        self.offload = IdleOffload(self.model, device, offload)
        self.compiled = CompiledLayers(self.model, model_cfg.torch_compile)
        self.budget = TokenBudget.maybe(
            self.ROLE, device, micro, adapt_to_memory, base_model(self.model).config,
            lambda: pending_bytes(self.model, [], None, self.compute_dtype, training=False),
            training=False, lm_head=True, compute_dtype=self.compute_dtype, checkpointing=False, chunk_size=training_cfg.logprob_chunk_size)

    @classmethod
    def from_config(cls, config, device: torch.device, actor_model: torch.nn.Module, **kwargs) -> "Reference":
        """kwargs: adapt_to_memory."""
        return cls(config.model, config.training, device, actor_model, MicroBatching.from_training(config.training),
                   temperature=config.rollout.temperature or 1.0, **kwargs)

    @torch.no_grad()
    def compute_log_probs(self, batch: Batch) -> torch.Tensor:
        """ref_log_probs (B, R) on CPU."""
        out = []
        with self.offload.active(), adapters_disabled(self.model):
            micro = self.micro if self.budget is None else self.budget.apply(self.micro)
            for mb in micro.split(batch):
                with on_device(mb, self.device, micro.packed, self.compute_dtype, self.compiled) as (mb, packed):
                    lp, _ = response_log_probs(self.model, mb.input_ids, mb.attention_mask, mb.position_ids,
                                               mb.response_length, temperature=self.temperature,
                                               chunk_size=self.training.logprob_chunk_size, with_entropy=False,
                                               packed=packed, packing_mode=self.packing_mode, fused=self.fused,
                                               multi_modal=mb.multi_modal)
                out.append(pad_response_columns(lp.float(), batch.response_length))
            result = torch.cat(out).cpu()  # one copy back, before the model goes idle
        return result
