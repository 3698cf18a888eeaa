"""Real verl's `main_ppo` keys -> this project's config: the one mapping table.

`TABLE` maps every real verl key (volcengine/verl 0.9.x `ppo_trainer.yaml`, dotted as typed after
`python3 -m verl.trainer.main_ppo`) that is accepted here to a `RealKey`:

    convert       (value, ctx, key) -> {our_key: value}; None = accepted and ignored (a note is printed)
    target        what it sets here (shown in docs/real_verl.md)
    default       the value used when the key is not given (NO_DEFAULT: nothing is set then)
    real_default  real verl's default, shown where `default` deliberately differs from it
    note          one line: the unit, the reason it is ignored, or what differs
    phase         2 for keys that need the run's total step count (computed after phase 1)

A key ending in ".*" covers every key below it; an exact entry wins over such a group. A key in
no entry is refused with one line (`verl.compat.translate`). A converter refuses a value that would
change results and has no equivalent here (ConfigError: one line, exit 2). docs/real_verl.md's
table is rendered from `TABLE` (`verl.compat.doc_table`); a test keeps the two equal. The entry type, value
checks and converter factories are in `verl.compat.real_keys`; converters that read other keys in
`verl.compat.real_converters`; the reward, vision-language and other engines' rows in real_rewards.py /
real_verl_vision.py / real_engines.py.

Units (real verl -> here): `data.train_batch_size` counts prompts, as `training.batch_size` does;
`ppo_mini_batch_size` counts prompts and is multiplied by `rollout.n` (our `training.mini_batch_size`
counts sequences); `ppo_micro_batch_size_per_gpu` counts sequences per device, as ours does.
"""

from __future__ import annotations

from typing import Optional

from verl.compat import real_converters as conv
from verl.compat import real_data_classes as data_classes
from verl.compat.real_keys import (ACTOR, ARR, ROLLOUT, RealKey, as_bool, as_float, as_int, custom, expand_path, expand_paths,
                                   ignored, module_names, only, reads, same_as, to)
from verl.compat.real_engines import ENTRIES as ENGINE_ENTRIES
from verl.compat.real_lora import ENTRIES as LORA_ENTRIES
from verl.compat.real_rewards import ENTRIES as REWARD_ENTRIES
from verl.compat.real_distillation import DISTILLATION_ENTRIES
from verl.compat.real_multi_turn import ENTRIES as MULTI_TURN_ENTRIES
from verl.compat.real_verl_vision import ENTRIES as VISION_ENTRIES, packing

# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------

_MICRO = "micro-batching splits the same update (results equal up to float rounding)"
_LAYOUT = ("the engine's layout over devices: no meaning on one process; several devices run one engine per "
           "tensor-parallel group here")
_ENGINE = "engine internals with no effect on results here"
_PROFILER = "profiling"


_ENTRIES: list[tuple[str, dict]] = [
    # ---- data
    ("data.train_files", to("data.train_files", expand_paths, real_default="~/data/rlhf/gsm8k/train.parquet",
                            note="required here; parquet/jsonl, verl row layout; ~ expanded")),
    ("data.val_files", to("data.val_files", expand_paths, real_default="~/data/rlhf/gsm8k/test.parquet",
                          note="not given: no validation; all rows are validated")),
    ("data.tokenizer", to("model.tokenizer")),
    ("data.prompt_key", to("data.prompt_key", default="prompt")),
    ("data.reward_fn_key", only("data_source", why="the reward is picked by data_source")),
    ("data.max_prompt_length", to("data.max_prompt_length", as_int, default=512, note="tokens")),
    ("data.max_response_length", custom(conv.max_response, "rollout.max_new_tokens", default=512,
                                        note="tokens; rollout.response_length wins when given")),
    ("data.train_batch_size", to("training.batch_size", as_int, default=1024, note="prompts per step (both)")),
    ("data.val_batch_size", ignored(_ENGINE)),
    ("data.gen_batch_size", custom(conv.gen_batch, "(= data.train_batch_size)", note="more prompts generated than "
                                   "trained (DAPO's group filtering) is refused: see algorithm.dynamic_sampling")),
    ("data.shuffle", to("data.shuffle", as_bool, default=True)),
    ("data.seed", to("seed", as_int, note="seeds data order, sampling and init here")),
    ("data.truncation", custom(conv.truncation, "data.truncation", default="error",
                               note="error | left | right; 'middle' is refused")),
    ("data.filter_overlong_prompts", reads("data.truncation=filter when true", default=False,
                                           note="steps per epoch are counted after filtering")),
    ("data.filter_overlong_prompts_workers", ignored(_ENGINE)),
    ("data.return_raw_input_ids", ignored("rewards read text here")),
    ("data.return_raw_chat", ignored("rewards read text here")),
    ("data.return_full_prompt", ignored("rewards read text here")),
    ("data.dataloader_num_workers", ignored(_ENGINE)),
    ("data.use_shm", ignored(_ENGINE)),
    ("data.validation_shuffle", ignored("validation order does not change its metrics")),
    ("data.trust_remote_code", ignored("the tokenizer follows actor_rollout_ref.model.trust_remote_code")),
    ("data.train_max_samples", only(-1, None, why="random subsets of the training set")),
    ("data.val_max_samples", only(-1, None, why="random subsets of the validation set")),
    ("data.custom_cls.path", custom(data_classes.dataset_class, "data.dataset_class = path:name",
                                    note="a dataset class (a torch Dataset; real verl's RLHFDataset interface is "
                                         "verl.utils.dataset.rl_dataset here): its items become the rows")),
    ("data.custom_cls.name", reads("data.dataset_class with data.custom_cls.path")),
    ("data.sampler.class_path", custom(data_classes.sampler_class, "data.sampler_class = class_path:class_name",
                                       note="an AbstractSampler (verl.experimental.dataset.sampler here): the "
                                            "order of training prompts; a curriculum one's update(batch) after "
                                            "each step")),
    ("data.sampler.class_name", reads("data.sampler_class with data.sampler.class_path")),
    ("data.datagen.path", only(None, why="dynamic data generation")),
    ("data.datagen.name", ignored("used with data.datagen.path only")),
    ("data.databuffer.enable", only(False, why="the filtered-sample buffer")),
    ("data.databuffer.keep_filtered", ignored("used with data.databuffer.enable only")),
    ("data.apply_chat_template_kwargs", to("data.chat_template_kwargs", conv.mapping("{enable_thinking: false}"),
                                          dict_value=True,
                                          note="passed to the chat template (e.g. enable_thinking)")),
    ("data.tool_config_path", only(None, why="tool schemas shown in single-turn prompts, which nothing runs; "
                                              "multi-turn tools are multi_turn.tool_config_path")),
    # ---- actor_rollout_ref.model
    (f"{ARR}.model.path", custom(lambda v, c, k: {"model.name": expand_path(v)}, "model.name",
                                 real_default="~/models/deepseek-llm-7b-chat",
                                 note="required here; hub name, local folder or tiny:<arch>")),
    (f"{ARR}.model.trust_remote_code", to("model.trust_remote_code", as_bool)),
    (f"{ARR}.model.enable_gradient_checkpointing", to("model.enable_gradient_checkpointing", as_bool,
                                                      real_default=True, note="memory and speed only")),
    (f"{ARR}.model.use_remove_padding", custom(packing, "training.use_packed_samples", phase=2,
                                               note="padding-free packing; a vision-language model trains padded "
                                                    "here (same results)")),
    *LORA_ENTRIES,  # verl/compat/real_lora.py: lora_rank, lora_alpha, ..., lora_adapter_path, lora.*
    (f"{ARR}.model.external_lib", only(None, why="importing extra model code")),
    (f"{ARR}.model.override_config", to("model.override_config", conv.model_override,
                                        dict_value=True,
                                        note="config.json fields replaced for the actor, reference and engine; "
                                             "a model_config entry holds them instead (Megatron's form)")),
    (f"{ARR}.model.custom_chat_template", only(None, why="a custom chat template")),
    (f"{ARR}.model.use_shm", ignored(_ENGINE)),
    (f"{ARR}.model.use_liger", ignored("fused kernels: " + _ENGINE)),
    (f"{ARR}.model.use_fused_kernels", ignored("fused kernels: " + _ENGINE)),
    (f"{ARR}.model.fused_kernel_options.*", ignored("fused kernels: " + _ENGINE)),
    (f"{ARR}.model.enable_activation_offload", ignored("memory only")),
    (f"{ARR}.model.return_last_hidden_state", ignored(_ENGINE)),
    (f"{ARR}.model.use_fused_loss", ignored("fused kernels: " + _ENGINE)),
    (f"{ARR}.model.mtp.enable", ignored("loading and saving the multi-token-prediction (MTP) layers, which train "
                                        "nothing without enable_train: the Hugging Face model here runs no MTP "
                                        "layer (a saved model has none); the update is the same")),
    (f"{ARR}.model.mtp.enable_train", only(False, why=conv.MTP_TRAINING)),
    (f"{ARR}.model.mtp.enable_rollout", ignored("speculative decoding with the MTP layers: speed only (the engine "
                                                "samples from the same distribution); decoding here is not "
                                                "speculative")),
    (f"{ARR}.model.mtp.*", ignored("used with mtp.enable_train / enable_rollout only")),
    (f"{ARR}.hybrid_engine", ignored("generation and training always share the devices here")),
    (f"{ARR}.nccl_timeout", to("distributed.timeout_s", as_float, note="seconds")),
    # ---- actor
    (f"{ACTOR}.ppo_mini_batch_size", custom(conv.mini_batch, "training.mini_batch_size = value x rollout.n",
                                            default=256, note="prompts (real) -> sequences (here)")),
    (f"{ACTOR}.ppo_micro_batch_size", custom(conv.global_micro, "training.micro_batch_size = value / devices",
                                             note="deprecated global size; " + _MICRO)),
    (f"{ACTOR}.ppo_micro_batch_size_per_gpu", to("training.micro_batch_size", as_int,
                                                 note="sequences per device; not given: the largest divisor "
                                                      "of the per-device mini-batch <= 4")),
    (f"{ACTOR}.use_dynamic_bsz", custom(conv.dynamic_bsz, "training.max_tokens_per_micro_batch when true",
                                        default=False, note=_MICRO)),
    (f"{ACTOR}.ppo_max_token_len_per_gpu", reads("the token budget of use_dynamic_bsz", default=16384)),
    (f"{ACTOR}.grad_clip", ignored("read by nothing in real verl 0.9.1: its engine clips at optim.clip_grad")),
    (f"{ACTOR}.clip_ratio", reads("clip_ratio_low/high when those are null", default=0.2)),
    (f"{ACTOR}.clip_ratio_low", custom(conv.clip_bound("algorithm.clip_ratio_low"), "algorithm.clip_ratio_low",
                                       default=None, real_default=0.2, note="null: clip_ratio")),
    (f"{ACTOR}.clip_ratio_high", custom(conv.clip_bound("algorithm.clip_ratio_high"), "algorithm.clip_ratio_high",
                                        default=None, real_default=0.2, note="null: clip_ratio")),
    (f"{ACTOR}.clip_ratio_c", custom(conv.dual_clip, "algorithm.clip_ratio_c", default=3.0,
                                     note="dual-clip bound; read by the vanilla loss only, as in real verl")),
    (f"{ACTOR}.policy_loss.loss_mode", custom(conv.loss_mode, "algorithm.policy_loss", default="vanilla",
                                              note="vanilla -> ppo; gspo, cispo, sapo, gpg, geo_mean, clip_cov, "
                                                   "kl_cov by name (docs/algorithms.md); others are refused")),
    *[(f"{ACTOR}.policy_loss.{k}", to(f"algorithm.loss_params.{k}", as_float, note=note)) for k, note in (
        ("clip_cov_ratio", "clip_cov"), ("clip_cov_lb", "clip_cov"), ("clip_cov_ub", "clip_cov"),
        ("kl_cov_ratio", "kl_cov"))],
    (f"{ACTOR}.policy_loss.ppo_kl_coef", to("algorithm.loss_params.ppo_kl_coef", as_float, default=0.1,
                                            note="kl_cov (ours: 1.0 elsewhere)")),
    (f"{ACTOR}.policy_loss.dro_beta", only(None, why="the DRO loss")),
    (f"{ACTOR}.policy_loss.*", ignored("parameters of loss modes that are refused here")),
    (f"{ACTOR}.tau_pos", to("algorithm.loss_params.tau_pos", as_float, note="sapo's gate temperature, A > 0")),
    (f"{ACTOR}.tau_neg", to("algorithm.loss_params.tau_neg", as_float, note="sapo's gate temperature, A <= 0")),
    (f"{ACTOR}.calculate_sum_pi_squared", ignored("computed exactly when the estimator reads it "
                                                  "(optimal_token_baseline)")),
    (f"{ACTOR}.loss_agg_mode", to("algorithm.loss_agg_mode", default="token-mean",
                                  note="same four modes; sapo and geo_mean average their own term per sequence "
                                       "(both), the KL and entropy terms follow it")),
    (f"{ACTOR}.entropy_coeff", to("algorithm.entropy_coeff", as_float, default=0.0)),
    (f"{ACTOR}.use_kl_loss", to("algorithm.use_kl_loss", as_bool, default=False)),
    (f"{ACTOR}.kl_loss_coef", to("algorithm.kl_loss_coef", as_float, default=0.001)),
    (f"{ACTOR}.kl_loss_type", custom(conv.kl_loss_type, "algorithm.kl_estimator", default="low_var_kl",
                                     note="kl/k1, mse/k2, low_var_kl/k3, abs; 'full' and '+' forms are refused")),
    (f"{ACTOR}.ppo_epochs", to("training.num_epochs", as_int, default=1, note="actor and critic")),
    (f"{ACTOR}.shuffle", to("training.shuffle_minibatches", as_bool, default=False,
                            note="false: contiguous mini-batches in batch order (ours: true elsewhere); true: "
                                 "drawn at random (another random order than real verl's)")),
    (f"{ACTOR}.use_torch_compile", ignored(_ENGINE)),
    (f"{ACTOR}.use_prefix_grouper", ignored("the shared-prompt forward of a group: speed only")),
    (f"{ACTOR}.ulysses_sequence_parallel_size", ignored("sequence parallelism: " + _ENGINE)),
    (f"{ACTOR}.entropy_from_logits_with_chunking", ignored("entropy is computed in chunks here anyway")),
    (f"{ACTOR}.entropy_checkpointing", ignored("memory only")),
    (f"{ACTOR}.use_fused_kernels", ignored("fused kernels: " + _ENGINE)),
    (f"{ACTOR}.use_remove_padding", custom(packing, "training.use_packed_samples", phase=2,
                                           note="as model.use_remove_padding")),
    (f"{ACTOR}.tis_imp_ratio_cap", custom(conv.tis_cap, "rollout.tis_cap", note="-1 = off")),
    (f"{ACTOR}.checkpoint.*", ignored("checkpoints always hold model, optimizer and the rest here")),
    (f"{ACTOR}.profiler.*", ignored(_PROFILER)),
    (f"{ACTOR}.fsdp_config.*", ignored("FSDP engine settings: " + _ENGINE)),
    (f"{ACTOR}.fsdp_config.param_offload", ignored("parameter offload: memory only")),
    (f"{ACTOR}.fsdp_config.optimizer_offload", to("training.offload_optimizer", as_bool, note="memory only")),
    (f"{ACTOR}.fsdp_config.model_dtype", custom(conv.model_dtype, "model.dtype + model.mixed_precision",
                                                real_default="fp32",
                                                note="bf16/fp16: the weights themselves in that dtype, no float32 "
                                                     "master copy (model.mixed_precision: pure)")),
    (f"{ACTOR}.fsdp_config.mixed_precision.param_dtype", custom(conv.param_dtype, "model.dtype",
                                                                note="bf16/fp16/fp32; not given: `auto` here, bf16 on "
                                                                     "a GPU as real verl, float32 on the CPU")),
    (f"{ACTOR}.optim.lr", to("training.lr", as_float, default=1e-6)),
    (f"{ACTOR}.optim.weight_decay", to("training.weight_decay", as_float, default=0.01, note="AdamW; actor and critic")),
    (f"{ACTOR}.optim.optimizer_impl", only("torch.optim", why="other optimizer libraries")),
    (f"{ACTOR}.optim.override_optimizer_config", custom(conv.override_optimizer, "(checked)", dict_value=True,
                                                         note="memory/speed-only entries (" + ", ".join(
                                                             conv.OPTIMIZER_MEMORY_ONLY) + ") accepted; others are "
                                                             "refused")),
    (f"{ACTOR}.optim.clip_grad", custom(conv.clip_grad, "training.grad_clip", default=1.0,
                                        note="actor and critic; optim.grad_clip (its older name) wins when given")),
    (f"{ACTOR}.optim.grad_clip", reads("training.grad_clip, over optim.clip_grad", default=None)),
    (f"{ACTOR}.optim.warmup_style", custom(conv.scheduler, "training.lr_scheduler", default="constant",
                                           note="constant | cosine, after a linear warm-up")),
    (f"{ACTOR}.optim.lr_scheduler_type", custom(conv.scheduler, "training.lr_scheduler", note="newer name of warmup_style")),
    (f"{ACTOR}.optim.lr_warmup_steps", custom(conv.warmup_steps, "training.warmup_steps", default=-1, phase=2,
                                              note="<= 0: from lr_warmup_steps_ratio")),
    (f"{ACTOR}.optim.lr_warmup_steps_ratio", custom(conv.warmup_ratio, "training.warmup_steps = ratio x total steps",
                                                    default=0.0, phase=2)),
    (f"{ACTOR}.optim.num_cycles", only(0.5, why="other cosine cycle counts")),
    (f"{ACTOR}.optim.total_training_steps", ignored("set from the run's total steps")),
    # ---- reference policy
    (f"{ARR}.ref.*", ignored("reference-model engine settings: " + _ENGINE)),
    # ---- rollout
    (f"{ROLLOUT}.name", custom(conv.rollout_name, "rollout.name", real_default="???",
                               note="vllm | sglang | hf; not given: hf here (real verl requires it)")),
    (f"{ROLLOUT}.mode", ignored("sync and async generation give the same samples")),
    (f"{ROLLOUT}.n", to("rollout.n", as_int, default=1, note="samples per prompt")),
    (f"{ROLLOUT}.temperature", custom(conv.temperature, "rollout.temperature", default=1.0, note="0 when do_sample=False")),
    (f"{ROLLOUT}.do_sample", reads("rollout.temperature=0 when false", default=True)),
    (f"{ROLLOUT}.top_k", custom(conv.top_k, "rollout.top_k", default=-1, note="-1 or 0 = off (0 here)")),
    (f"{ROLLOUT}.top_p", to("rollout.top_p", as_float, default=1.0)),
    (f"{ROLLOUT}.response_length", to("rollout.max_new_tokens", as_int, note="default: data.max_response_length")),
    (f"{ROLLOUT}.prompt_length", ignored("the prompt limit is data.max_prompt_length")),
    (f"{ROLLOUT}.dtype", ignored("the engine runs in model.dtype here")),
    (f"{ROLLOUT}.gpu_memory_utilization", to("rollout.gpu_memory_utilization", as_float, note="vLLM")),
    (f"{ROLLOUT}.tensor_model_parallel_size", to("rollout.tensor_model_parallel_size", as_int, real_default=2,
                                                 note="vLLM; not given: 1 here")),
    (f"{ROLLOUT}.max_num_batched_tokens", to("rollout.max_num_batched_tokens", as_int, note="vLLM")),
    (f"{ROLLOUT}.max_model_len", to("rollout.max_model_len", as_int, note="vLLM")),
    (f"{ROLLOUT}.max_num_seqs", to("rollout.max_num_seqs", as_int, note="vLLM")),
    (f"{ROLLOUT}.enforce_eager", to("rollout.enforce_eager", as_bool, note="vLLM")),
    (f"{ROLLOUT}.free_cache_engine", to("rollout.enable_sleep_mode", as_bool, note="vLLM")),
    (f"{ROLLOUT}.update_weights_bucket_megabytes", to("distributed.weight_bucket_mb", as_float, note="older name")),
    (f"{ROLLOUT}.checkpoint_engine.update_weights_bucket_megabytes", to("distributed.weight_bucket_mb", as_float)),
    (f"{ROLLOUT}.checkpoint_engine.backend", only("naive", why="weight-transfer backends; weights move in "
                                                                "memory here")),
    (f"{ROLLOUT}.checkpoint_engine.*", ignored("weight-transfer settings: " + _ENGINE)),
    (f"{ROLLOUT}.enable_prefix_caching", ignored("vLLM's prefix cache: speed only (on here; reset at each weight "
                                                 "update)")),
    (f"{ROLLOUT}.data_parallel_size", ignored(_LAYOUT)),
    (f"{ROLLOUT}.expert_parallel_size", ignored(_LAYOUT)),
    (f"{ROLLOUT}.pipeline_model_parallel_size", ignored(_LAYOUT)),
    (f"{ROLLOUT}.ignore_eos", only(False, why="generating past EOS")),
    (f"{ROLLOUT}.skip_rollout", only(False, why="replaying dumped rollouts")),
    (f"{ROLLOUT}.use_fire_sampling", only(False, why="FIRE sampling")),
    (f"{ROLLOUT}.chat_scheduler", only(None, why="custom chat schedulers")),
    (f"{ROLLOUT}.agent.num_workers", ignored(_ENGINE)),
    (f"{ROLLOUT}.cudagraph_capture_sizes", ignored(_ENGINE)),
    (f"{ROLLOUT}.load_format", ignored(_ENGINE)),
    (f"{ROLLOUT}.layered_summon", ignored(_ENGINE)),
    (f"{ROLLOUT}.enable_chunked_prefill", ignored(_ENGINE)),
    (f"{ROLLOUT}.disable_log_stats", ignored(_ENGINE)),
    (f"{ROLLOUT}.multi_stage_wake_up", ignored(_ENGINE)),
    (f"{ROLLOUT}.engine_kwargs.*", ignored(_ENGINE)),
    (f"{ROLLOUT}.micro_batch_size", ignored(_MICRO)),
    (f"{ROLLOUT}.log_prob_micro_batch_size", ignored(_MICRO)),
    (f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", ignored(_MICRO)),
    (f"{ROLLOUT}.log_prob_use_dynamic_bsz", ignored(_MICRO)),
    (f"{ROLLOUT}.log_prob_max_token_len_per_gpu", ignored(_MICRO)),
    (f"{ROLLOUT}.calculate_log_probs", custom(conv.calculate_log_probs, "rollout.logprob_check_every",
                                              real_default=True,
                                              note="true: 1 (every step); not given or false: the check every "
                                                   "10th step here (a metric either way: no update changes)")),
    (f"{ROLLOUT}.quantization", custom(conv.quantization, "rollout.quantization", default=None,
                                       note="fp8: block-FP8 vLLM engine weights; then, unless set, rollout.tis_cap "
                                            "2.0 (rollout_is=token at real verl's threshold) and the log-prob "
                                            "check on every step; torchao is refused")),
    (f"{ROLLOUT}.quantization_config_file", only(None, why="a quantization config file (torchao's)")),
    (f"{ROLLOUT}.skip_dump_dir", ignored("used with skip_rollout only")),
    (f"{ROLLOUT}.trace.*", ignored("tracing")),
    (f"{ROLLOUT}.prometheus.enable", ignored("Prometheus scraping of the vLLM/SGLang servers' metrics: monitoring "
                                             "only; nothing is exported to Prometheus here, the engine's timings "
                                             "and throughput are in metrics.jsonl (timing_s/*, perf/*)")),
    (f"{ROLLOUT}.prometheus.*", ignored("used with prometheus.enable only")),
    (f"{ROLLOUT}.profiler.*", ignored(_PROFILER)),
    (f"{ROLLOUT}.val_kwargs.n", reads("val_kwargs.do_sample: data.val_n", default=1)),
    (f"{ROLLOUT}.val_kwargs.do_sample", custom(conv.val_sampling, "data.val_do_sample + data.val_n, val_temperature, "
                                                              "val_top_p, val_top_k", default=False,
                                               note="True: n sampled answers (mean@n; n=1: mean@1_sampled) with "
                                                    "val_kwargs' temperature/top_p/top_k, besides the greedy "
                                                    "mean@1; False: the greedy answer (n copies are one)")),
    (f"{ROLLOUT}.val_kwargs.temperature", reads("data.val_temperature with do_sample", default=0.0)),
    (f"{ROLLOUT}.val_kwargs.top_p", reads("data.val_top_p with do_sample", default=1.0)),
    (f"{ROLLOUT}.val_kwargs.top_k", reads("data.val_top_k with do_sample", default=-1)),
    # ---- critic
    ("critic.enable", custom(conv.critic_enable, "(checked)", default=None, note="null: a critic exactly for gae")),
    ("critic.model.path", custom(conv.critic_path, "critic.name", real_default="~/models/deepseek-llm-7b-chat",
                                 note="not given: the actor's model")),
    ("critic.model.tokenizer_path", ignored("the critic reads the actor's text with its own tokenizer here")),
    ("critic.model.trust_remote_code", to("critic.trust_remote_code", as_bool)),
    ("critic.model.override_config", only({}, None, why="changing the model's config", dict_value=True)),
    ("critic.model.external_lib", only(None, why="importing extra model code")),
    ("critic.model.lora_rank", only(0, why="a LoRA critic")),
    ("critic.model.lora_alpha", ignored("used with critic.model.lora_rank only")),
    ("critic.model.target_modules", ignored("used with critic.model.lora_rank only")),
    ("critic.model.enable_gradient_checkpointing", ignored("memory only")),
    ("critic.model.use_remove_padding", ignored("the critic packs when the actor does")),
    ("critic.model.use_shm", ignored(_ENGINE)),
    ("critic.model.enable_activation_offload", ignored("memory only")),
    ("critic.model.fsdp_config.*", ignored("FSDP engine settings: " + _ENGINE)),
    ("critic.model.fsdp_config.model_dtype", only("fp32", "float32", None, why=conv.MASTER_WEIGHTS)),
    ("critic.fsdp.*", ignored("FSDP engine settings (current name of critic.model.fsdp_config): " + _ENGINE)),
    ("critic.fsdp.model_dtype", only("fp32", "float32", None, why=conv.MASTER_WEIGHTS)),
    ("critic.optim.override_optimizer_config", custom(conv.override_optimizer, "(checked)", dict_value=True,
                                                      note="as the actor's")),
    ("critic.optim.lr", to("training.critic_lr", as_float, default=1e-5)),
    ("critic.optim.weight_decay", to("training.critic_weight_decay", as_float, default=0.01,
                                     note="the critic's own, as real verl's")),
    ("critic.optim.warmup_style", custom(conv.critic_scheduler, "training.critic_lr_scheduler",
                                         note="older name of lr_scheduler_type")),
    ("critic.optim.lr_scheduler_type", custom(conv.critic_scheduler, "training.critic_lr_scheduler",
                                              default="constant", note="the critic's own, as real verl's")),
    ("critic.optim.lr_warmup_steps", custom(conv.critic_warmup, "training.critic_warmup_steps", phase=2, default=-1,
                                            note="<= 0: from critic.optim.lr_warmup_steps_ratio (the critic's "
                                                 "own, as real verl's; not the actor's)")),
    ("critic.optim.lr_warmup_steps_ratio", custom(conv.critic_warmup, "training.critic_warmup_steps = ratio x total steps",
                                                  phase=2, default=0.0)),
    ("critic.optim.clip_grad", custom(conv.critic_clip_grad, "training.critic_grad_clip", default=1.0,
                                      note="the critic's own, as real verl's; optim.grad_clip (older name) wins")),
    ("critic.optim.grad_clip", reads("training.critic_grad_clip, over critic.optim.clip_grad", default=None)),
    ("critic.optim.num_cycles", only(0.5, why="other cosine cycle counts")),
    ("critic.optim.total_training_steps", ignored("set from the run's total steps")),
    ("critic.ppo_mini_batch_size", same_as(f"{ACTOR}.ppo_mini_batch_size", "training.mini_batch_size")),
    ("critic.ppo_epochs", same_as(f"{ACTOR}.ppo_epochs", "training.num_epochs")),
    ("critic.grad_clip", ignored("read by nothing in real verl 0.9.1: its engine clips at critic.optim.clip_grad")),
    ("critic.loss_agg_mode", same_as(f"{ACTOR}.loss_agg_mode", "algorithm.loss_agg_mode")),
    ("critic.cliprange_value", to("algorithm.cliprange_value", as_float, default=0.5)),
    ("critic.shuffle", same_as(f"{ACTOR}.shuffle", "training.shuffle_minibatches")),
    ("critic.ppo_micro_batch_size", ignored("the critic uses training.micro_batch_size; " + _MICRO)),
    ("critic.ppo_micro_batch_size_per_gpu", ignored("the critic uses training.micro_batch_size; " + _MICRO)),
    ("critic.forward_micro_batch_size", ignored(_MICRO)),
    ("critic.forward_micro_batch_size_per_gpu", ignored(_MICRO)),
    ("critic.use_dynamic_bsz", ignored("follows the actor's use_dynamic_bsz; " + _MICRO)),
    ("critic.ppo_max_token_len_per_gpu", ignored(_MICRO)),
    ("critic.forward_max_token_len_per_gpu", ignored(_MICRO)),
    ("critic.ulysses_sequence_parallel_size", ignored("sequence parallelism: " + _ENGINE)),
    ("critic.rollout_n", ignored("follows rollout.n")),
    ("critic.checkpoint.*", ignored("checkpoints always hold model, optimizer and the rest here")),
    ("critic.profiler.*", ignored(_PROFILER)),
    # ---- other engines' keys (Megatron, VeOmni, TorchTitan, fsdp_turbo) and the Megatron optimizer's
    *ENGINE_ENTRIES,  # verl/compat/real_engines.py
    # ---- vision-language data and models
    *VISION_ENTRIES,  # verl/compat/real_verl_vision.py
    # ---- rewards
    *REWARD_ENTRIES,  # verl/compat/real_rewards.py
    # ---- algorithm
    ("algorithm.adv_estimator", custom(conv.adv_estimator, "algorithm.name + algorithm.adv_estimator", default="gae",
                                       note="gae, grpo, rloo, remax, reinforce_plus_plus(_baseline) "
                                            "(+ _vectorized forms), gpg, opo, gdpo, optimal_token_baseline; "
                                            "others are refused")),
    ("algorithm.gdpo_reward_keys", only(None, why="GDPO's parts here are the components of a combined "
                                        "reward_fn (docs/algorithms.md), not compute_score's dict keys")),
    ("algorithm.gdpo_reward_weights", ignored("the combined reward_fn's component weights serve GDPO here")),
    ("algorithm.gamma", to("algorithm.gamma", as_float, default=1.0)),
    ("algorithm.lam", to("algorithm.lam", as_float, default=1.0, note="GAE lambda (ours: 0.95 elsewhere)")),
    ("algorithm.norm_adv_by_std_in_grpo", custom(conv.norm_adv_by_std, "algorithm.norm_adv_by_std_in_grpo",
                                                 default=True, note="gpg: false, gdpo: true, whatever it says (their "
                                                                    "real verl functions do not read it)")),
    ("algorithm.use_kl_in_reward", to("algorithm.use_kl_in_reward", as_bool, default=False)),
    ("algorithm.kl_penalty", custom(conv.kl_penalty, "algorithm.kl_estimator (with use_kl_in_reward)", default="kl",
                                    note="as kl_loss_type; one estimator when both KL placements are on")),
    ("algorithm.kl_ctrl.type", to("algorithm.kl_ctrl.type", default="fixed", note="fixed | adaptive")),
    ("algorithm.kl_ctrl.kl_coef", to("algorithm.kl_coef", as_float, default=0.001, note="KL-in-reward coefficient")),
    ("algorithm.kl_ctrl.horizon", to("algorithm.kl_ctrl.horizon", as_int, default=10000)),
    ("algorithm.kl_ctrl.target_kl", to("algorithm.kl_ctrl.target_kl", as_float, default=0.1)),
    ("algorithm.use_pf_ppo", custom(conv.pf_ppo, "algorithm.pf_ppo.enable", default=False,
                                    note="resamples the batch by its scores after GAE (gae only, as real verl; "
                                         "other estimators: noted, no effect)")),
    ("algorithm.pf_ppo.reweight_method", reads("algorithm.pf_ppo.reweight_method with use_pf_ppo", default="pow",
                                               note="pow | max_min | max_random")),
    ("algorithm.pf_ppo.weight_pow", reads("algorithm.pf_ppo.weight_pow with use_pf_ppo", default=2.0)),
    ("algorithm.rollout_correction.rollout_is", custom(conv.rollout_is, "algorithm.rollout_correction.rollout_is",
                                                       default=None,
                                                       note="token | sequence importance weights pi_old / pi_engine "
                                                            "(docs/algorithms.md#rollout-correction)")),
    ("algorithm.rollout_correction.rollout_is_threshold", reads("algorithm.rollout_correction.rollout_is_threshold "
                                                                "with rollout_is", default=2.0,
                                                                note="U: truncation; 'L_U': IcePop")),
    ("algorithm.rollout_correction.rollout_is_batch_normalize", reads(
        "algorithm.rollout_correction.rollout_is_batch_normalize with rollout_is", default=False)),
    ("algorithm.rollout_correction.rollout_rs", custom(conv.rollout_rs, "algorithm.rollout_correction.rollout_rs",
                                                       default=None, note="rejection sampling: token_k1, "
                                                                          "seq_mean_k1, seq_max_k2, ... "
                                                                          "(comma-separated)")),
    ("algorithm.rollout_correction.rollout_rs_threshold", reads("algorithm.rollout_correction.rollout_rs_threshold "
                                                                "with rollout_rs", default=None)),
    ("algorithm.rollout_correction.bypass_mode", custom(conv.bypass_mode, "algorithm.rollout_correction.bypass_mode",
                                                        default=False, note="the engine's log-probs as pi_old; "
                                                                            "the policy loss is loss_type's")),
    ("algorithm.rollout_correction.loss_type", reads("algorithm.rollout_correction.loss_type and algorithm."
                                                     "policy_loss with bypass_mode", default="ppo_clip",
                                                     note="ppo_clip | reinforce")),
    # ---- trainer
    ("trainer.total_epochs", custom(conv.total_epochs, "training.total_steps = epochs x (prompts // train_batch_size)",
                                    default=30, phase=2, note="used when total_training_steps is null")),
    ("trainer.total_training_steps", custom(conv.total_training_steps, "training.total_steps", default=None, phase=2)),
    ("trainer.project_name", to("logging.project", default="verl_examples")),
    ("trainer.experiment_name", to("logging.run_name", default="gsm8k")),
    ("trainer.logger", custom(conv.logger, "logging.backends (+ jsonl)", real_default=["console", "wandb"],
                              note="console, wandb, tensorboard; not given: console; metrics.jsonl always")),
    ("trainer.nnodes", custom(conv.placement, "distributed.nnodes", note="more than one device: distributed.backend=ray")),
    ("trainer.n_gpus_per_node", custom(conv.placement, "distributed.devices_per_node", real_default=8,
                                       note="not given: 1 (one process) here")),
    ("trainer.device", custom(conv.device, "device", real_default="cuda", note="cuda | cpu; not given: auto here (the GPU "
                                                                        "when there is one)")),
    ("trainer.save_freq", custom(conv.save_freq, "checkpoint.save_full_every (+ save_mode=full)", default=-1,
                                 note="resumable checkpoints; -1 = none")),
    ("trainer.resume_mode", custom(conv.resume_mode, "checkpoint.resume", default="auto",
                                   note="auto | disable (none + overwrite) | resume_path (trainer.resume_from_path)")),
    ("trainer.resume_from_path", reads("checkpoint.resume with resume_mode=resume_path", default=None)),
    ("trainer.test_freq", custom(conv.test_freq, "training.val_every", default=-1, note="-1 = no validation")),
    ("trainer.val_before_train", ignored("validation runs at step 0 exactly when test_freq > 0")),
    ("trainer.val_only", only(False, why="validation-only runs")),
    ("trainer.critic_warmup", to("algorithm.critic_warmup", as_int, default=0)),
    ("trainer.default_local_dir", custom(lambda v, c, k: {"checkpoint.save_dir": expand_path(v)}, "checkpoint.save_dir",
                                         default="checkpoints/${trainer.project_name}/${trainer.experiment_name}",
                                         note="the run folder (checkpoint layout differs)")),
    ("trainer.default_hdfs_dir", only(None, why="HDFS uploads")),
    ("trainer.max_actor_ckpt_to_keep", custom(conv.keep_ckpts, "checkpoint.keep_last", default=None, phase=2,
                                              note="null: keep all")),
    ("trainer.max_critic_ckpt_to_keep", ignored("one checkpoint holds actor and critic here")),
    ("trainer.del_local_ckpt_after_load", ignored("checkpoints are never deleted on load here")),
    ("trainer.log_val_generations", ignored("validation samples go to samples.jsonl")),
    ("trainer.rollout_data_dir", ignored("rollout samples go to samples.jsonl")),
    ("trainer.validation_data_dir", ignored("validation samples go to samples.jsonl")),
    ("trainer.balance_batch", ignored("ranks get balanced token counts here anyway")),
    ("trainer.esi_redundant_time", ignored(_ENGINE)),
    ("trainer.ray_wait_register_center_timeout", ignored(_ENGINE)),
    ("trainer.use_legacy_worker_impl", ignored(_ENGINE)),
    ("trainer.profile_steps", ignored(_PROFILER)),
    ("trainer.profile_continuous_steps", ignored(_PROFILER)),
    ("trainer.controller_nsight_options.*", ignored(_PROFILER)),
    ("trainer.worker_nsight_options.*", ignored(_PROFILER)),
    ("trainer.npu_profile.*", ignored(_PROFILER)),
    # ---- Ray, profiler, Hydra
    ("ray_kwargs.ray_init.num_cpus", to("distributed.num_cpus", as_int)),
    ("ray_kwargs.*", ignored("Ray start-up settings")),
    ("ray_init.num_cpus", to("distributed.num_cpus", as_int, note="older name")),
    ("ray_init.*", ignored("Ray start-up settings")),
    ("global_profiler.*", ignored(_PROFILER)),
    *DISTILLATION_ENTRIES,  # verl/compat/real_distillation.py
    *MULTI_TURN_ENTRIES,  # verl/compat/real_multi_turn.py
    ("transfer_queue.enable", only(False, why="the transfer-queue data plane; batches stay in memory here")),
    ("transfer_queue.*", ignored("used with transfer_queue.enable only")),
    ("skip.*", only(False, None, "cache", [], "~/.verl/rollout_dump", why="replaying dumped rollouts")),
    ("hydra.*", ignored("Hydra's own settings (no Hydra here)")),
]

TABLE: dict[str, RealKey] = {}
for _key, _fields in _ENTRIES:
    assert _key not in TABLE, f"duplicate real verl key {_key}"
    TABLE[_key] = RealKey(**_fields)
del _key, _fields

# Top-level sections of real verl's config. Our own sections outside these pass straight through.
REAL_SECTIONS = ("model_engine", "actor_rollout_ref", "data", "critic", "reward_model", "custom_reward_function", "reward",
                 "sandbox_fusion", "algorithm", "distillation", "transfer_queue", "skip", "trainer", "ray_kwargs",
                 "ray_init", "global_profiler", "hydra")


def lookup(key: str) -> Optional[tuple[str, RealKey]]:
    """(table key, entry) for a real verl key: the exact entry, else the longest group ("a.b.*")
    above it; Hydra's `_target_` fields are accepted and ignored. None when the key is not in it."""
    if key in TABLE:
        return key, TABLE[key]
    if key.split(".")[-1] == "_target_":
        return key, RealKey(convert=None, target="(ignored)", note="Hydra's class selector")
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        group = ".".join(parts[:cut]) + ".*"
        if group in TABLE:
            return group, TABLE[group]
    return None
