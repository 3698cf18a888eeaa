"""`rollout` section: sampling settings shared by every engine, and each engine's own knobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.config.keys import Section, at_most, derived, key
from verl.errors import ConfigError

# Upper bounds for values that cannot fit a machine, refused before anything is built (a batch
# of 1e20 prompts otherwise runs silently for minutes before running out of memory).
MAX_SEQUENCES_PER_STEP = 2 ** 20  # training.batch_size x rollout.n
MAX_TOKENS = 2 ** 20  # data.max_prompt_length, rollout.max_new_tokens (the model's context is checked at load)
MAX_SEED = 2 ** 32 - 1  # numpy's seed range; torch seeds are derived as seed * 1_000_003 + step
QUANTIZATIONS = ("fp8",)  # rollout.quantization (None: the engine holds the actor's dtype)
# Defaults under rollout.quantization: fp8 (verl/config/auto.py fills the None keys)
FP8_TIS_CAP = 2.0  # rollout.tis_cap: real verl's algorithm.rollout_correction.rollout_is_threshold default
FP8_CHECK_EVERY = 1  # rollout.logprob_check_every: the engine-vs-actor mismatch on every step
DEFAULT_CHECK_EVERY = 10


def check_seed(seed, key_path: str) -> None:
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"{key_path}: {seed} is outside 0..{MAX_SEED} (the seed range numpy and torch share)")


@dataclass
class MultiTurnConfig(Section):
    """Multi-turn rollouts (on when rollout.tools or rollout.environment is set; docs/agents.md)."""

    SECTION = "rollout.multi_turn"
    max_turns: int = key(4, ge=1)  # model turns per trajectory (the last one gets no tool answer)
    max_tool_calls: int = key(8, ge=0)  # tool calls per trajectory; more are answered with an error message
    max_total_tokens: int = key(256, ge=1)  # response tokens per trajectory: model turns + tool/environment turns
    tool_timeout_s: float = key(10.0, gt=0)  # seconds one tool call may take (then an error message)
    tool_format: str = key("hermes", choices="verl.agents.parsing:TOOL_CALL_FORMATS")
    tool_call_pattern: Optional[str] = None  # tool_format regex: (?P<name>...) and (?P<arguments>...) groups
    max_tool_output_chars: int = key(2000, ge=1)  # longer tool outputs are cut, with a marker
    # which part of a longer tool output is kept: the start, the end, or half of each (real verl: middle)
    tool_output_keep: str = key("head", choices="verl.agents.tools:TRUNCATE_KEEPS")
    # true: a model turn ends at its first call's closing tag (</tool_call>), so the call is answered at once;
    # false: the turn runs to its end-of-turn token and its calls are parsed from the whole turn (real verl)
    stop_at_tool_call: bool = True
    # tool calls of one model turn that run; those after them are left unanswered (real verl's
    # max_parallel_calls, 1 there). None: all (each still counts against max_tool_calls)
    max_calls_per_turn: Optional[int] = key(None, ge=1)
    # the agent loop of a row without an `agent_name` column: tool_agent (multi-turn) or single_turn_agent
    # (one model turn, no tools in its prompt); verl/agents/agent_loops.py
    default_agent: str = key("tool_agent", choices="verl.agents.agent_loops:AGENT_LOOPS")
    tool_workers: int = key(8, ge=1)  # concurrent tool calls (turn_barrier false: trajectories, each up to this)
    # true: each turn waits for every tool call of the turn, then all live trajectories generate together
    # (batch composition fixed: reproducible). false: a trajectory's next model turn joins the next engine
    # call as soon as its own tools have answered, so a slow tool delays only its own trajectory.
    turn_barrier: bool = True


@dataclass
class RolloutConfig(Section):
    SECTION = "rollout"
    # auto: vllm on a CUDA device when vLLM is installed (the log says so), else hf
    name: str = key("auto", choices="verl.rollout.registry:ENGINE_CHOICES", resume_safe=True)
    auto_note: str = derived("")  # which engine auto chose, on a GPU (logged; verl/config/auto.py)
    n: Optional[int] = key(None, ge=1)  # samples per prompt; None -> 1, or 4 for group estimators
    batch_size: Optional[int] = key(None, ge=1, resume_safe=True)  # sequences per engine call (None = all)
    max_new_tokens: int = key(32, ge=1)
    temperature: float = key(1.0, ge=0)
    top_p: float = key(1.0, unit="(0, 1]")
    top_k: int = key(0, ge=0)  # 0 = off
    stop: list[str] = key(factory=list)  # extra stop strings
    seed: Optional[int] = None  # None -> top-level seed
    # vLLM engine settings (seed section 5.2)
    # sequences the vLLM engine decodes together; None: all of a step's (batch_size x n), one wave
    max_num_seqs: Optional[int] = key(None, ge=1, resume_safe=True)
    gpu_memory_utilization: float = key(0.5, unit="(0, 1]", resume_safe=True)
    tensor_model_parallel_size: int = key(1, ge=1, resume_safe=True)
    max_num_batched_tokens: Optional[int] = key(None, resume_safe=True)
    # None -> max_prompt_length + max_new_tokens (also the HF static cache length)
    max_model_len: Optional[int] = key(None, resume_safe=True)
    enable_sleep_mode: bool = key(True, resume_safe=True)  # free KV cache while the actor trains (GPU only)
    # needed: the engine sleeps for the update only where the update's mini-batch would not fit one
    # micro-batch beside the awake engine (decided at the first step, verl/trainer/sleep_policy.py);
    # always: every step
    sleep_when: str = key("needed", choices=("needed", "always"), resume_safe=True)
    # vLLM weight sync on a GPU: direct (the model's own loader into the engine's tensors, in place)
    # or layerwise (vLLM's reload_weights, which re-processes every layer: what a quantized engine
    # gets whatever this says, and the CPU backend, whose linear weights are packed after loading)
    weight_reload: str = key("direct", choices=("direct", "layerwise"), resume_safe=True)
    # vLLM, vision-language models: images per prompt the engine takes (vLLM's limit_mm_per_prompt;
    # None: vLLM's own default); a prompt with more is a one-line error naming this key
    limit_images: Optional[int] = key(None, ge=1, resume_safe=True)
    kv_cache_gb: float = key(1.0, gt=0, resume_safe=True)  # CPU KV cache size for vLLM (VLLM_CPU_KVCACHE_SPACE)
    # vLLM without torch.compile / CUDA graphs. None: eager on the CPU (compiling adds ~15 s to
    # engine start, docs/vllm.md; decoding then runs ~1.3x faster), compiled with CUDA graphs on a GPU
    enforce_eager: Optional[bool] = key(None, resume_safe=True)
    # fp8: the vLLM engine holds block-FP8 linear weights (128 x 128 scales; LM head, embeddings and norms in
    # the engine's dtype), quantized at every weight sync; the actor trains in its own precision
    # (verl/rollout/fp8_vllm.py). It turns on the correction and the per-step check below by default.
    quantization: Optional[str] = key(None, choices=QUANTIZATIONS)
    # Importance correction engine -> pi_old, the shorthand of algorithm.rollout_correction
    # (verl/algorithms/off_policy.py); 0 = off. is_mode truncate: weight tokens by min(pi_old/pi_engine,
    # tis_cap); mask: tokens whose ratio is outside [1/tis_cap, tis_cap] leave the loss (its denominator too).
    # None: 0, or FP8_TIS_CAP (real verl's rollout_is_threshold default) under quantization: fp8
    tis_cap: Optional[float] = key(None, ge=0)
    is_mode: str = key("truncate", choices="verl.algorithms.off_policy:IS_MODES")
    # The engine's log-probs of the sampled tokens feed rollout/logprob_diff (the stale-weights check)
    # and, where the loss reads them (async_training, tis_cap > 0, multi-turn rollouts), the loss: those
    # get them every step. Otherwise they are asked for on every k-th training step and the first of each
    # run; vLLM skips computing them on the others (the log-softmax over the vocabulary each decode step
    # costs 10-35% of raw vLLM's tokens/s, docs/vllm.md). The HF and SGLang engines report them anyway.
    # 10: a stale engine (a sync that did not land) is caught within 10 steps, for ~1/10 of the cost;
    # 1 checks every step. None: 10, or 1 under quantization: fp8 (its mismatch is logged every step).
    logprob_check_every: Optional[int] = key(None, ge=1, resume_safe=True)
    # Read the weights of the first and last decoder layer back from the engine after the first sync
    # and every this many steps, and compare them with the actor's (LoRA merged): a sync that did not
    # reach the engine stops the run (verl/rollout/sync_check.py). 0: never.
    verify_sync_every: int = key(10, ge=0, resume_safe=True)
    # Engines in their own processes (distributed.rollout: workers, one vLLM engine per replica): a replica
    # that dies or stops answering is started again once a run, synced from the actor, and the call that
    # failed is made again. false: the run stops within seconds with one line naming the lost process
    # (exit 3), and --resume auto continues from the last full checkpoint.
    restart_on_failure: bool = key(False, resume_safe=True)
    # Hugging Face backend (rollout.name: hf)
    hf_weight_copy: bool = False  # generate with an own copy of the actor in model.dtype, synced after each update
    # dynamic | static (fixed max_model_len KV cache; compiled decode on CUDA)
    cache_implementation: str = key("dynamic", choices=("dynamic", "static"))
    # transformers: model.generate | verl: verl's own decode loop (static cache, one CUDA graph per decode step)
    decode_loop: str = key("transformers", choices=("transformers", "verl"))
    # Agents (docs/agents.md): tools as "module:function" / "file.py:function" / calculator / python,
    # an environment as "module:Class"; either turns on multi-turn rollouts
    tools: list[str] = key(factory=list)
    environment: Optional[str] = None
    # Real verl's YAML files (docs/agents.md, "Tool classes" and "Interactions"): stateful tool classes
    # (tools: [{class_name, config, tool_schema}]) and interactions (interaction: [{name, class_name, config}])
    tool_config: Optional[str] = None
    interaction_config: Optional[str] = None
    # Mixture-of-experts models (docs/moe.md): the update routes each token to the experts it went to in
    # another pass instead of its own top-k. off | engine: the rollout engine's routing (real verl's R3; the
    # hf, vllm and sglang engines record it) | pi_old: the pi_old pass's (real verl's R2). The router's
    # weights still get their gradient through the chosen experts' probabilities.
    routing_replay: str = key("off", choices=("off", "engine", "pi_old"))
    multi_turn: MultiTurnConfig = key(factory=MultiTurnConfig)

    @property
    def uses_hf_only_keys(self) -> bool:
        return bool(self.hf_weight_copy or self.cache_implementation != "dynamic" or self.decode_loop != "transformers")

    @property
    def is_multi_turn(self) -> bool:
        return bool(self.tools or self.environment or self.tool_config or self.interaction_config)

    def engine_log_probs_every_step(self, async_enabled: bool, correction: bool = False) -> bool:
        """Whether the loss reads the engine's log-probs, so that every step needs them (see
        logprob_check_every): async training, the importance correction (rollout.tis_cap, or
        `correction`: algorithm.rollout_correction on), multi-turn trajectories."""
        return bool(async_enabled or (self.tis_cap or 0) > 0 or correction or self.is_multi_turn)

    @property
    def response_budget(self) -> int:
        """Response tokens of one sample: max_new_tokens, or for multi-turn trajectories (model and
        tool turns together) multi_turn.max_total_tokens."""
        return self.multi_turn.max_total_tokens if self.is_multi_turn else self.max_new_tokens

    def validate(self, path: str) -> None:
        mt = self.multi_turn
        if self.routing_replay == "engine" and self.is_multi_turn:
            raise ConfigError(f"{path}.routing_replay: engine is not carried through multi-turn rollouts yet (each "
                              "turn is its own engine call); use routing_replay: pi_old")
        if self.environment and self.interaction_config:
            raise ConfigError(f"{path}.interaction_config: a rollout has one environment, and {path}.environment is "
                              "set too; give one of them")
        if mt.tool_format == "regex" and not mt.tool_call_pattern:
            raise ConfigError(f"{path}.multi_turn.tool_call_pattern: required for tool_format: regex, with groups "
                              "(?P<name>...) and (?P<arguments>...)")
        if mt.tool_call_pattern is not None:  # checked here, before any model loads
            from verl.agents.parsing import compile_pattern

            try:
                compile_pattern(mt.tool_call_pattern)
            except ValueError as exc:
                raise ConfigError(f"{path}.multi_turn.tool_call_pattern: {exc}") from None
        at_most(self.max_new_tokens, MAX_TOKENS, f"{path}.max_new_tokens", "no model's context is that long")
        at_most(self.n, MAX_SEQUENCES_PER_STEP, f"{path}.n", "samples per prompt must fit in memory")
        check_seed(self.seed, f"{path}.seed")
        # The Hugging Face backend's own keys, and the keys each needs.
        if self.name not in ("hf", "auto") and self.hf_weight_copy:
            raise ConfigError(f"{path}.hf_weight_copy: only for rollout.name: hf (got rollout.name: {self.name})")
        if self.name not in ("hf", "auto") and self.cache_implementation != "dynamic":
            raise ConfigError(f"{path}.cache_implementation: only for rollout.name: hf (got rollout.name: "
                              f"{self.name})")
        if self.decode_loop == "verl":
            if self.name not in ("hf", "auto"):
                raise ConfigError(f"{path}.decode_loop: verl is the Hugging Face backend's loop (got rollout.name: "
                                  f"{self.name})")
            if not self.hf_weight_copy:
                raise ConfigError(f"{path}.decode_loop: verl generates with the weight copy; set "
                                  "rollout.hf_weight_copy: true")
            if self.cache_implementation != "static":
                raise ConfigError(f"{path}.decode_loop: verl decodes into a static KV cache; set "
                                  "rollout.cache_implementation: static")
