"""benchmarks/e2e_grpo.py's work axis: which work each side computes in a row.

    defaults       every system at its own defaults (the rows published before 2026-12-03)
    like-for-like  the same work on every side, set explicitly on each:
                   - the engine's per-token log-probs every step (verl rollout.logprob_check_every=1; TRL+vLLM
                     always asks vLLM for them, logprobs=0; real verl rollout.calculate_log_probs=True, its default)
                   - no importance-sampling correction (verl rollout.tis_cap=0; TRL
                     vllm_importance_sampling_correction=False; real verl none besides bypass_mode's PPO ratio)
                   - no separate old-log-prob pass: pi_old from the update's first forward (verl
                     training.old_log_probs_from_update; TRL takes old_per_token_logps = the update's detached
                     log-probs when IS is off and gradient_accumulation_steps is a multiple of steps_per_generation,
                     grpo_trainer.py `_generate_and_score_completions`; real verl bypass_mode=True takes the engine's
                     log-probs as pi_old, which also skips the pass)
                   - no gradient checkpointing (verl's default; TRL gradient_checkpointing=False with micro-batches
                     that fit, --trl-micro-batch; real verl enable_gradient_checkpointing=False)
                   - TRL with LoRA: a bf16 base (model_init_kwargs dtype), as verl keeps its frozen base in model.dtype
                   - no text decoded by vLLM (verl's requests: detokenize=False; TRL: generation_kwargs detokenize=False,
                     an expert's setting: TRL reads only each output's token_ids, vllm_generation.py `all_completion_ids`,
                     while vLLM 0.26, when a request detokenizes, decodes every log-prob token to text, Python work per
                     token; added 2026-12-04 from the generation probe, after the runs of 2026-12-03)
                   - real verl at its experts' speed settings: FSDP2, use_fused_kernels=True (log-probs from the hidden
                     states, not the per-row logprobs_from_logits loop it falls back to without flash-attn)

The lengths axis (--lengths, orthogonal to the work mode: what the data looks like, not which settings each side
runs; the realistic rows are the like-for-like work on realistic data):

    fixed          every completion runs to max_new_tokens (vLLM's ignore_eos on both sides), prompts of
                   --prompt-words words
    realistic      completions stop where the engine samples EOS under one logit bias b on both sides (vLLM
                   SamplingParams.logit_bias {EOS: b}: verl's extra sampling fields, TRL's generation_kwargs,
                   which TRL 1.16 merges into the SamplingParams of its colocated engine,
                   vllm_generation.py `generate`), b calibrated once by the driver so that the median is a
                   quarter of max_new_tokens (benchmarks/eos_probe.py, benchmarks/lengths.py: with random
                   weights the lengths are about geometric, ~6% at the maximum); prompts of
                   ceil(W / 4) .. W words (lengths.prompt_word_count, the same prompts on both sides). Not
                   token-for-token the same completions (each side's engine draws its own), but one length
                   distribution: each row reports its own median, share at the maximum and tokens, and its
                   floors come from its own lengths. The engine's log-probs then include the bias (both
                   engines report processed log-probs), so verl's engine-vs-actor check would read it as a
                   mismatch of ~b / mean length: its thresholds are lifted, the check itself still runs
                   every step like-for-like (the same work). A per-request max_tokens (async_grpo.py's drawn
                   lengths) is not an option: TRL sends one SamplingParams for all requests

The TRL facts are read from the TRL 1.16.0 wheel (trl/trainer/grpo_trainer.py, grpo_config.py,
generation/vllm_generation.py), the real-verl ones from the verl 0.9.1 wheel
(trainer/config/_generated_ppo_trainer.yaml, trainer/ppo/rollout_corr_helper.py apply_bypass_mode, which raises
without rollout_log_probs, hence calculate_log_probs=True). Not stageable: flash-attn (no PyPI wheel), so real verl
keeps SDPA without remove-padding in both rows.
"""

from __future__ import annotations

WORK_MODES = ("defaults", "like-for-like")
LENGTHS = ("fixed", "realistic")
# vLLM systems only: the bias travels in vLLM's SamplingParams on both sides
REALISTIC_SYSTEMS = ("verl-vllm", "trl-vllm")

# verl with realistic lengths: the engine's log-prob of each sampled EOS carries the bias b the actor does not
# see (module docstring), so rollout/logprob_diff's warning and stop levels are lifted out of the way.
VERL_REALISTIC = {
    "training.logprob_diff_warn": 1e6,
    "training.logprob_diff_stop": 1e6,
}

# verl (this repository): config keys per work mode; "defaults" sets none.
VERL_LIKE_FOR_LIKE = {
    "rollout.logprob_check_every": 1,
    "rollout.tis_cap": 0.0,
    "training.old_log_probs_from_update": True,
    "model.enable_gradient_checkpointing": False,
}

# real verl 0.9.1: Hydra overrides appended for like-for-like (expert speed settings + the same work).
REAL_VERL_LIKE_FOR_LIKE = [
    "actor_rollout_ref.rollout.calculate_log_probs=True",
    "algorithm.rollout_correction.bypass_mode=True",
    "actor_rollout_ref.model.use_fused_kernels=True",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
]


def verl_settings(work: str, lengths: str = "fixed") -> dict:
    """Our verl's config keys (section.key -> value) for `work` and `lengths`."""
    _check(work, lengths)
    return {**(VERL_LIKE_FOR_LIKE if work == "like-for-like" else {}),
            **(VERL_REALISTIC if lengths == "realistic" else {})}


def stop_kwargs(eos_bias: float | None = None, eos_id: int | None = None) -> dict:
    """The vLLM SamplingParams fields that decide where completions end, the same dict for both sides:
    fixed lengths (eos_bias None) run to max_tokens with ignore_eos; realistic ones stop at an EOS sampled
    under logit_bias {eos_id: eos_bias}."""
    if eos_bias is None:
        return {"ignore_eos": True}
    if eos_id is None:
        raise ValueError("an EOS bias needs the EOS id")
    return {"logit_bias": {int(eos_id): float(eos_bias)}}


def trl_micro_batches(n: int, micro_batch: int | None) -> tuple[int, int]:
    """(per_device_train_batch_size, gradient_accumulation_steps) for n completions in micro-batches of
    `micro_batch` sequences (None: one micro-batch of all n, TRL's layout in the defaults rows)."""
    mb = micro_batch or n
    if mb <= 0 or n % mb:
        raise ValueError(f"--trl-micro-batch {micro_batch} must divide the {n} completions of a step")
    return mb, n // mb


def trl_kwargs(work: str, n: int, micro_batch: int | None, lora: bool) -> dict:
    """GRPOConfig keywords that differ between the work modes (the rest: e2e_trl.worker_trl).
    defaults: TRL's own (gradient checkpointing and the IS correction on, as GRPOConfig defaults them; set
    explicitly so a TRL release that changes a default changes no row silently)."""
    _check(work)
    per_device, accumulation = trl_micro_batches(n, micro_batch if work == "like-for-like" else None)
    out = dict(per_device_train_batch_size=per_device, gradient_accumulation_steps=accumulation)
    if work == "defaults":
        return dict(out, gradient_checkpointing=True, vllm_importance_sampling_correction=True)
    return dict(out, gradient_checkpointing=False, vllm_importance_sampling_correction=False)


def trl_vllm_generation_kwargs(work: str, eos_bias: float | None = None, eos_id: int | None = None) -> dict:
    """TRL's generation_kwargs (vLLM SamplingParams keys) for the trl-vllm rows: verl's stops (`stop_kwargs`)
    and, like-for-like, no text decoded by vLLM (detokenize=False, as verl sends)."""
    _check(work)
    return {**stop_kwargs(eos_bias, eos_id), **({"detokenize": False} if work == "like-for-like" else {})}


def trl_weight_dtype(work: str, system: str, lora: bool) -> str:
    """TRL's model_init_kwargs dtype: bf16 weights for trl-bf16-static, and for the LoRA base like-for-like (verl
    keeps its frozen base in model.dtype; in TRL's defaults the base stays fp32 under autocast)."""
    _check(work)
    return "bfloat16" if system == "trl-bf16-static" or (lora and work == "like-for-like") else "float32"


def real_verl_overrides(work: str) -> list[str]:
    _check(work)
    return list(REAL_VERL_LIKE_FOR_LIKE) if work == "like-for-like" else []


def caption(system: str, work: str, trl_micro_batch: int | None = None, n: int | None = None,
            lora: bool = False, lengths: str = "fixed", eos_bias: float | None = None) -> str:
    """What the row's system computed in each step, in words (every result row carries it), with the
    lengths' part when they are realistic."""
    _check(work, lengths)
    text = _work_caption(system, work, trl_micro_batch, n, lora)
    if lengths == "realistic":
        text += (f"; realistic lengths: stops at EOS sampled under logit bias {eos_bias:.3g}, prompts of a quarter to "
                 f"all of --prompt-words words")
    return text


def _work_caption(system: str, work: str, trl_micro_batch: int | None, n: int | None, lora: bool) -> str:
    ll = work == "like-for-like"
    if system.startswith("trl"):
        vllm = system == "trl-vllm"
        lp = "vLLM log-probs every step" if vllm else "no engine log-probs (HF generate)"
        if ll:
            mb, acc = trl_micro_batches(n or 1, trl_micro_batch) if n else (trl_micro_batch, None)
            return (f"TRL like-for-like: {lp}{'; vLLM detokenize off' if vllm else ''}; IS correction off; pi_old = "
                    f"the update's forward (no extra pass); no gradient checkpointing; micro-batches of {mb} x {acc}"
                    + ("; bf16 LoRA base" if lora else ""))
        is_part = ("IS correction on (its extra no-grad pi_old forward)" if vllm
                   else "no IS correction; pi_old = the update's forward")
        return (f"TRL defaults: {lp}; {is_part}; gradient checkpointing on; one micro-batch of all completions"
                + ("; fp32 LoRA base under autocast" if lora else ""))
    if system == "real-verl":
        if ll:
            return ("real verl expert: engine log-probs every step as pi_old (bypass_mode), no old-log-prob pass; "
                    "FSDP2, fused kernels; SDPA without remove-padding (no flash-attn wheel); no checkpointing")
        return ("real verl defaults: engine log-probs every step, a separate old-log-prob pass (per-row "
                "logprobs_from_logits without flash-attn); FSDP1, SDPA without remove-padding; no checkpointing")
    if system not in ("verl-vllm", "verl-sglang"):  # the HF backends: generate returns no engine log-probs
        return ("verl " + work + ": HF generate (no engine log-probs); no IS correction; pi_old = the update's "
                "first forward; no gradient checkpointing")
    if ll:
        return ("verl like-for-like: engine log-probs every step (logprob_check_every 1); no IS correction; "
                "pi_old = the update's first forward; no gradient checkpointing")
    return ("verl defaults: engine log-probs on 1 step in 10 (the warm-up only, in a short run); no IS "
            "correction; pi_old = the update's first forward; no gradient checkpointing")


def _check(work: str, lengths: str = "fixed") -> None:
    if work not in WORK_MODES:
        raise ValueError(f"work {work!r}: one of {WORK_MODES}")
    if lengths not in LENGTHS:
        raise ValueError(f"lengths {lengths!r}: one of {LENGTHS}")
