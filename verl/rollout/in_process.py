"""What the in-process engines (vLLM, SGLang) share: starting from the actor (`from_actor`), syncing from its module.

A subclass implements `load_weights(weights) -> bytes` (asleep or awake) and records its sleep/wake
metrics in `_pending_metrics`; `sync_weights` streams the module's weights (HF names, LoRA merged)
through it (lazily to an engine that sets `loads_weight_stream`, else as one list), remembers the module (re-synced from after a sleep that dropped the weights), and
returns the sync's seconds and bytes with the sleep/wake metrics since the last sync.

A vision-language actor's weights go under their HF names, the vision tower's included
(`model.visual.*`, `model.vision_tower.*`, `model.multi_modal_projector.*`; vLLM's own name mapping
takes them). With `model.freeze_vision_tower` the tower (and its projector: verl.models.vision) never
changes: it is sent at the first sync (and after a sleep that released the engine's weights) and left
out of the others, which send only the rest, where the engine keeps what a load leaves out
(`keeps_unsent_weights`: vLLM's direct reload, the GPU default; its layerwise reload, the CPU's, is sent
everything, since it rebuilds each layer and warns for every one it is not given).
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from verl.models.lora import base_model
from verl.rollout.base import RolloutEngine
from verl.rollout.hf_weights import hf_named_weights
from verl.rollout.vllm_weights import export_hf_folder, has_flat_llava_tower


class InProcessEngine(RolloutEngine):
    """Subclasses set, in __init__: `_source = None` (the module last synced from) and
    `_pending_metrics = {}` (sleep/wake metrics not yet returned by sync_weights); their `generate`
    records its split with `_record_generate`."""

    _generate_metrics: dict = {}
    # load_weights takes a lazy stream of (name, tensor) and consumes it once, in bounded buckets:
    # a LoRA model's merged weights then never exist all at once (verl.rollout.hf_weights.weight_buckets)
    loads_weight_stream = False
    # Which weight names a frozen vision tower has (model.freeze_vision_tower; None: none frozen), and
    # whether the engine holds them already (set by the first sync that sent them)
    frozen: Optional[Callable[[str], bool]] = None
    _frozen_loaded = False

    def _record_generate(self, start: float, call_start: float, call_end: float, parsed: float = None,
                         decode_s: float = None) -> None:
        """perf_counter marks of one generate: its start, the engine call's start and end, and (where
        the backend reports them) the end of reading the engine's results into lists, and the seconds
        of the batch decode (RustBatchDecode.seconds): the split of the time around the call."""
        end = time.perf_counter()
        m = {"rollout/engine_call_s": call_end - call_start, "rollout/around_engine_s": (call_start - start) + (end - call_end)}
        if parsed is not None:
            m["rollout/readout_parse_s"] = parsed - call_end  # the engine's outputs into id / log-prob lists
            if decode_s is not None:
                m["rollout/readout_decode_s"] = decode_s
                m["rollout/readout_batch_s"] = end - parsed - decode_s  # the Batch's arrays
        self._generate_metrics = m

    def metrics(self) -> dict:
        """Of the last generate: seconds inside the engine's own call, and seconds verl spent around
        it (the requests, reading the results, the Batch), with that split where the backend records
        it (readout_parse_s, readout_batch_s, readout_decode_s): where a rollout stage's time goes."""
        return dict(self._generate_metrics)

    @classmethod
    def from_actor(cls, model: torch.nn.Module, tokenizer, config):
        """Engine for the trainer: same checkpoint and dtype as the actor, then one sync so the
        engine starts from exactly the actor's weights (LoRA merged, GGUF dequantised)."""
        engine = cls(tokenizer=tokenizer, rollout_cfg=config.rollout, dtype=config.model.dtype,
                     **engine_start_args(model, tokenizer, config))
        if getattr(config.model, "freeze_vision_tower", False):
            engine.freeze_vision_tower(model)
        engine.sync_weights(model)
        return engine

    def load_weights(self, weights: list) -> int:
        raise NotImplementedError

    def keeps_unsent_weights(self) -> bool:
        """Whether weights left out of the next load stay in the engine as they are (False after a sleep
        that released the weights, or where a load rebuilds every layer: vLLM's layerwise reload)."""
        return True

    def freeze_vision_tower(self, model: torch.nn.Module) -> None:
        """model.freeze_vision_tower: the vision tower is sent once, then left out of every sync while
        the engine holds it. Its parameters must all be frozen (requires_grad False), else the engine
        would keep a stale copy of weights the update changes."""
        from verl.models.vision import is_vision_name, vision_parameters

        params = vision_parameters(model)
        trainable = next((n for n, p in params if p.requires_grad), None)
        if trainable:
            raise RuntimeError(f"model.freeze_vision_tower is true but {trainable} (in the vision tower) requires "
                               "grad: the engine would keep its first copy while the update changes it")
        self.frozen, self._frozen_loaded = (is_vision_name if params else None), False
        if params:
            n = sum(p.numel() for _, p in params)
            how = ("goes to the engine once; later weight syncs send the rest" if self.keeps_unsent_weights() else
                   "is still sent at every sync: this engine's reload rebuilds every layer (vLLM's layerwise reload)")
            print(f"verl: model.freeze_vision_tower: the vision tower ({n:,} parameters) {how}", flush=True)

    def sync_weights(self, model: torch.nn.Module) -> dict:
        start = time.perf_counter()
        skip = self.frozen if (self._frozen_loaded and self.keeps_unsent_weights()) else None
        weights = hf_named_weights(model, skip=skip)
        n_bytes = self.load_weights(weights if self.loads_weight_stream else list(weights))
        self._source = model
        self._frozen_loaded = self.frozen is not None
        metrics = {"timing_s/update_weights": time.perf_counter() - start, "rollout/weight_sync_bytes": float(n_bytes)}
        metrics.update(self._pending_metrics)
        self._pending_metrics = {}
        return metrics


def engine_start_args(model, tokenizer, config) -> dict:
    """What an in-process engine (vLLM, SGLang) starts from in the trainer: the actor's checkpoint
    folder (or an exported Hugging Face folder when the actor came from GGUF or a hub name), its
    device, and the sequences of one step (training.batch_size x rollout.n: the engine's batch
    capacity when rollout.max_num_seqs is unset), resized for the asynchronous mode where it asks
    (AsyncTrainingConfig.engine_args). The engine is synced from the module right after."""
    import os

    from verl.models.tiny import resolve_model_name

    path = resolve_model_name(config.model.name)
    if config.model.gguf_file or config.model.override_config or not os.path.isdir(path) or has_flat_llava_tower(model):
        path = export_hf_folder(model, tokenizer)  # its config.json is the actor's, overrides included
    batch_size = getattr(getattr(config, "training", None), "batch_size", None)
    max_num_seqs = batch_size * (config.rollout.n or 1) if batch_size else None
    args = dict(model_path=path, device=str(next(model.parameters()).device), max_num_seqs=max_num_seqs)
    pixels = {k: getattr(getattr(config, "data", None), k, None) for k in ("min_pixels", "max_pixels")}
    pixels = {k: v for k, v in pixels.items() if v is not None}
    if pixels and getattr(base_model(model).config, "vision_config", None) is not None:
        args["mm_processor_kwargs"] = pixels  # a vision-language model's image sizes, as the actor's processor got
    a = getattr(config, "async_training", None)
    if a is not None:
        args.update(a.engine_args(max_num_seqs))
    return args
