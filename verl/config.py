"""Typed configuration: every key verl reads, its default, and its checks.

This file is the one source of truth for defaults. YAML goes in through
`load_config(path, overrides)`; dotted overrides (`training.lr=1e-5`) come after.
Unknown keys, wrong types and impossible values raise `ConfigError` naming the
key path, so a typo never silently becomes a default.

Derived values (e.g. the output directory, samples per prompt for group
estimators) are resolved in `Config.finalize()` and nowhere else.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml


from verl.errors import ConfigError  # noqa: E402  (re-exported: verl.config.ConfigError)


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


# ---------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------


@dataclass
class LoraConfig:
    rank: int = 0  # 0 = LoRA off
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: Any = "all-linear"  # "all-linear" or a list of module names


@dataclass
class ModelConfig:
    type: str = "huggingface"
    # Hub name, local directory, or "tiny:<arch>" (a small random model built locally;
    # arch in gpt2|llama|qwen2) -- the embedded default that runs with no downloads.
    name: str = "tiny:gpt2"
    tokenizer: Optional[str] = None  # defaults to `name`
    gguf_file: Optional[str] = None  # a .gguf file inside `name` (or an absolute path)
    dtype: str = "float32"  # float32 | bfloat16 | float16 (parameters of the trained copy)
    use_flash_attention: bool = False  # flash_attention_2 when installed, else an error
    # auto | sdpa | eager | flash_attention_2. auto: PyTorch SDPA, except eager attention for
    # bfloat16/float16 on the CPU, where SDPA's flash backward is ~2.5x slower than eager's matmuls
    attn_implementation: str = "auto"
    trust_remote_code: bool = False
    enable_gradient_checkpointing: bool = False
    # torch.compile the decoder layers for training forwards/backwards (fuses norms, rotary,
    # activations; the first steps pay the compile time). Generation stays eager.
    torch_compile: bool = False
    # How a bfloat16/float16 model.dtype trains full fine-tuning (master weights stay float32):
    # autocast (casts each weight at each matmul; float32 residual stream) | param_copy (forward
    # and backward on a model.dtype copy of the weights, gradients summed in float32, as FSDP and
    # DeepSpeed mixed precision do: fewer casts, half the residual-stream traffic). The actor, in
    # one process (a separate critic keeps autocast); the sharded actor always computes in
    # model.dtype (FSDP's MixedPrecisionPolicy).
    mixed_precision: str = "autocast"
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class RolloutConfig:
    name: str = "hf"  # hf | vllm
    n: Optional[int] = None  # samples per prompt; None -> 1, or 4 for group estimators
    batch_size: Optional[int] = None  # sequences generated per engine call (None = all)
    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    stop: list[str] = field(default_factory=list)  # extra stop strings
    seed: Optional[int] = None  # None -> top-level seed
    # vLLM engine settings (seed section 5.2)
    max_num_seqs: int = 64
    gpu_memory_utilization: float = 0.5
    tensor_model_parallel_size: int = 1
    max_num_batched_tokens: Optional[int] = None
    max_model_len: Optional[int] = None  # None -> max_prompt_length + max_new_tokens (also the HF static cache length)
    enable_sleep_mode: bool = True  # free KV cache while the actor trains (GPU only)
    kv_cache_gb: float = 1.0  # CPU KV cache size for vLLM (VLLM_CPU_KVCACHE_SPACE)
    # vLLM without torch.compile / CUDA graphs. None: eager on the CPU (compiling costs ~70 s at
    # engine start; decoding then runs ~1.3x faster), compiled with CUDA graphs on a GPU
    enforce_eager: Optional[bool] = None
    # Truncated importance sampling: weight tokens by min(pi_old/pi_engine, cap); 0 = off
    tis_cap: float = 0.0
    # Hugging Face backend (rollout.name: hf)
    hf_weight_copy: bool = False  # generate with an own copy of the actor in model.dtype, synced after each update
    cache_implementation: str = "dynamic"  # dynamic | static (fixed max_model_len KV cache; compiled decode on CUDA)
    # transformers: model.generate | verl: verl's own decode loop (static cache, one CUDA graph per decode step)
    decode_loop: str = "transformers"


@dataclass
class KLControlConfig:
    type: str = "fixed"  # fixed | adaptive
    target_kl: float = 0.1
    horizon: int = 10000


@dataclass
class DynamicSamplingConfig:
    enable: Optional[bool] = None  # None -> on for the dapo preset, off otherwise
    max_rounds: int = 4  # extra generation rounds before giving up filling the batch


@dataclass
class OverlongPenaltyConfig:
    enable: Optional[bool] = None  # None -> on for the dapo preset, off otherwise
    buffer_len: int = 8  # penalty ramps over the last `buffer_len` tokens before the max
    penalty_factor: float = 1.0


@dataclass
class AlgorithmConfig:
    # Preset that fills the keys below which the user did not set: ppo | grpo | dr_grpo |
    # rloo | reinforce_pp | reinforce_pp_baseline | remax | dapo | gspo
    name: str = "ppo"
    adv_estimator: Optional[str] = None  # gae | grpo | dr_grpo | rloo | reinforce_pp | reinforce_pp_baseline | remax
    gamma: float = 1.0
    lam: float = 0.95
    # KL to the reference policy
    kl_coef: Optional[float] = None  # coefficient when KL is in the reward
    use_kl_in_reward: Optional[bool] = None
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    use_kl_loss: Optional[bool] = None
    kl_loss_coef: Optional[float] = None
    kl_estimator: Optional[str] = None  # k1 | k2 | k3 | abs
    entropy_coeff: float = 0.0
    # Policy loss
    policy_loss: Optional[str] = None  # ppo | gspo | reinforce
    clip_ratio_low: float = 0.2
    clip_ratio_high: Optional[float] = None  # None -> clip_ratio_low (symmetric)
    clip_ratio_c: float = 0.0  # dual-clip lower bound for negative advantages; 0 = off
    loss_agg_mode: Optional[str] = None  # token-mean | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm
    norm_adv_by_std_in_grpo: Optional[bool] = None
    # Value side
    cliprange_value: float = 0.2
    critic_warmup: int = 0  # steps during which only the critic trains
    # DAPO extras
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    overlong_penalty: OverlongPenaltyConfig = field(default_factory=OverlongPenaltyConfig)
    mask_truncated: bool = False  # drop responses that hit max_new_tokens from the loss


@dataclass
class TrainingConfig:
    total_steps: int = 20
    batch_size: int = 8  # prompts per step
    num_epochs: int = 1  # passes over each rollout batch (PPO epochs)
    mini_batch_size: Optional[int] = None  # sequences per optimizer step; None = whole batch
    micro_batch_size: int = 4  # sequences per forward/backward
    max_tokens_per_micro_batch: Optional[int] = None  # token-budget micro-batching
    use_packed_samples: bool = False
    grad_clip: float = 1.0
    lr: float = 1e-5
    critic_lr: Optional[float] = None  # None -> 10 x lr
    weight_decay: float = 0.0
    lr_scheduler: str = "constant"  # constant | linear | cosine
    warmup_steps: int = 0
    val_every: int = 0  # 0 = no periodic validation
    max_minutes: float = 0.0  # wall-clock budget for this process; the step that crosses it is the last (0 = none)
    max_bad_steps: int = 3  # consecutive NaN/Inf steps before training stops
    logprob_chunk_size: int = 1024  # tokens per chunk when computing log-probs/entropy
    # Keep the update's logits ((response tokens, vocab) in model.dtype) for its backward instead of
    # recomputing them chunk by chunk: faster, 2 bytes x vocab more memory per response token in bf16
    logprob_keep_logits: bool = False
    # One optimizer step per batch (num_epochs 1, one mini-batch, no KL in the reward): pi_old is the
    # policy the update starts from, so its first forward gives log pi_old; no separate no-grad pass
    old_log_probs_from_update: bool = True
    offload_optimizer: bool = False
    offload_idle_models: bool = False


@dataclass
class RewardFnConfig:
    # string_match | keyword | length_penalty | python | gsm8k | math | number | format |
    # huggingface_rm | api | combined
    type: str = "string_match"
    weight: float = 1.0
    name: Optional[str] = None  # label used in metric names; defaults to type
    target: str = "I love reinforcement learning"  # string_match
    keywords: list[str] = field(default_factory=list)  # keyword
    target_length: int = 32  # length_penalty (characters)
    function: Optional[str] = None  # python: "path/to/file.py:function_name"
    strict: bool = False  # gsm8k: only "#### <n>"
    format_score: float = 0.0  # score for well-formatted but wrong answers
    # huggingface_rm
    model_name: Optional[str] = None
    device: str = "cpu"
    max_length: int = 512
    rm_batch_size: int = 16
    normalize: bool = False
    clip: Optional[float] = None
    # api
    url: Optional[str] = None
    api_key_env: Optional[str] = None
    # seconds one call may take (verl.rewards.deadline): None -> 300 per batch call, 0 = no limit (the
    # function then runs in the calling thread); api: each HTTP request's timeout (None -> 30), the
    # whole call bounded by its worst case
    timeout_s: Optional[float] = None
    max_retries: int = 3
    concurrency: int = 8
    on_error: str = "fail"  # fail | zero  (also used when a function raises)
    components: list = field(default_factory=list)  # combined: list of RewardFnConfig


@dataclass
class CriticConfig:
    type: str = "huggingface"
    name: Optional[str] = None  # None -> the actor's model
    share_actor: bool = False  # value head on the actor's trunk, trained by one combined loss
    vf_coef: float = 0.5  # share_actor: L = L_policy + vf_coef * L_value
    dtype: Optional[str] = None  # None -> model.dtype
    trust_remote_code: bool = False


@dataclass
class DataConfig:
    train_files: list[str] = field(default_factory=list)  # jsonl / parquet paths
    val_files: list[str] = field(default_factory=list)
    # Written by the Python API for in-memory train_dataset / eval_dataset (never read as data):
    # e.g. "datasets.Dataset rows=12 fingerprint=..."; a trainer built from a config that has one
    # needs the data passed again (docs/python_api.md)
    train_source: Optional[str] = None
    val_source: Optional[str] = None
    prompts: list = field(default_factory=list)  # inline prompts (strings)
    prompt_key: str = "prompt"
    answer_key: str = "answer"
    apply_chat_template: bool = True  # when the tokenizer has one
    system_prompt: Optional[str] = None
    max_prompt_length: int = 128
    truncation: str = "filter"  # filter | left | right | error
    shuffle: bool = True
    val_n: int = 1  # samples per validation prompt (mean@n)
    val_max_samples: int = 256
    baseline_prompt: Optional[str] = "Explain reinforcement learning in one sentence."


@dataclass
class LoggingConfig:
    backends: list[str] = field(default_factory=lambda: ["console", "jsonl"])
    project: str = "verl"
    run_name: Optional[str] = None
    wandb_mode: str = "auto"  # auto (online when an API key is configured, else offline) | online | offline | disabled
    log_every: int = 1
    val_samples: int = 4  # held-out (prompt, greedy answer, reward) rows printed and logged per validation
    progress_bar: bool = True


@dataclass
class CheckpointConfig:
    save_dir: Optional[str] = None  # None -> ./outputs/<model-name>-<algorithm>
    save_actor_every: int = 0  # 0 = only at the end
    save_full_every: int = 0
    keep_last: int = 2
    save_mode: str = "actor"  # final save: actor | full | lora
    resume: str = "none"  # none | auto | PATH
    resume_force: bool = False  # resume even if the config changed in ways that change training
    overwrite: bool = False  # a new run where an earlier one is: move that one to previous_run_N/ (else refused)
    stop_grace_s: float = 20.0  # SIGINT/SIGTERM: the longest a stop may take before a forced exit (verl/signals.py)


@dataclass
class DistributedConfig:
    backend: str = "none"  # none | ray  (docs/distributed.md)
    address: Optional[str] = None  # auto (a running `ray start` cluster) | host:port | local/None (start one here)
    nnodes: int = 1
    devices_per_node: int = 1  # data-parallel ranks = nnodes x devices_per_node (GPUs, or CPU processes)
    colocate_critic: bool = True  # critic on the actor's devices, else on devices of its own
    colocate_reward: bool = True  # a reward model (huggingface_rm) on the actor's devices, else its own
    rollout: str = "auto"  # auto | driver | workers (one vLLM engine per replica)
    weight_bucket_mb: float = 512.0  # actor -> rollout replicas weight sync message size
    timeout_s: float = 600.0  # deadline of every call to the workers and of every collective
    num_cpus: Optional[int] = None  # CPUs of a Ray instance started here (address local/None)
    object_store_mb: Optional[int] = None  # its object store size (None = Ray's default)


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    reward_fn: RewardFnConfig = field(default_factory=RewardFnConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    data: DataConfig = field(default_factory=DataConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    seed: int = 42
    device: str = "auto"  # auto | cpu | cuda | cuda:N

    def finalize(self) -> "Config":
        """Fill derived values and check cross-key constraints (the only place that does)."""
        from verl.config_checks import finalize_config

        return finalize_config(self)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def output_dir(self) -> str:
        return self.checkpoint.save_dir  # resolved by finalize()


# ---------------------------------------------------------------------------
# Building dataclasses from plain dicts, with errors that name the key
# ---------------------------------------------------------------------------

_LIST_OF_DATACLASS = {("reward_fn", "components"): RewardFnConfig}


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], path)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping (section), got {value!r}")
        return build_section(tp, value, path)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{path}: expected an integer, got {value!r}") from None
        if not INT64_MIN <= number <= INT64_MAX:  # torch, numpy and the file formats hold 64-bit integers
            raise ConfigError(f"{path}: {number} does not fit in a 64-bit integer")
        return number
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        try:
            number = float(value)
        except (ValueError, OverflowError):
            raise ConfigError(f"{path}: expected a number, got {value!r}") from None
        if not math.isfinite(number):
            # NaN passes every `x > 0` check as false and every `x < 0` check as false: a NaN
            # clip disables clipping, a NaN lr corrupts the weights. No key means NaN or infinity.
            raise ConfigError(f"{path}: must be a finite number, got {value!r}")
        return number
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return str(value)
    if tp is list or origin is list:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            value = [value]  # a single file or prompt is a list of one
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        item_types = typing.get_args(tp)
        if item_types == (str,):
            for i, item in enumerate(value):
                if not isinstance(item, str):
                    raise ConfigError(f"{path}[{i}]: expected a string, got {item!r}"
                                      + (f" (quote it: '{item}')" if isinstance(item, (int, float)) else ""))
        return list(value)
    return value


def build_section(cls, data: dict, path: str = ""):
    """Build dataclass `cls` from `data`, rejecting unknown keys with a suggestion."""
    if data is None:
        data = {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.5)
            hint = f"; did you mean '{(path + '.') if path else ''}{close[0]}'?" if close else ""
            valid = ", ".join(sorted(fields))
            raise ConfigError(f"unknown config key '{key_path}'{hint} (valid keys here: {valid})")
        hints = typing.get_type_hints(cls)
        list_cls = _LIST_OF_DATACLASS.get((path.split(".")[-1] if path else "", key))
        if list_cls is None and cls is RewardFnConfig and key == "components":
            list_cls = RewardFnConfig
        if list_cls is not None:
            if not isinstance(value, list):
                raise ConfigError(f"{key_path}: expected a list of sections, got {value!r}")
            kwargs[key] = [build_section(list_cls, v, f"{key_path}[{i}]") for i, v in enumerate(value)]
        else:
            kwargs[key] = _coerce(value, hints[key], key_path)
    return cls(**kwargs)


def _set_dotted(data: dict, dotted: str, raw: str) -> None:
    """Apply one `a.b.c=value` override to a nested dict (value parsed as YAML)."""
    keys = dotted.split(".")
    node = data
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override '{dotted}': '{k}' is not a section")
    if raw == "":
        node[keys[-1]] = ""
        return
    loader = _UniqueKeyLoader(raw)
    loader.source = f"override '{dotted}'"
    try:
        node[keys[-1]] = loader.get_single_data()
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"override '{dotted}={raw}': the value is not valid YAML ({problem})") from None
    finally:
        loader.dispose()


def parse_overrides(overrides: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like key.path=value")
        key, raw = item.split("=", 1)
        pairs.append((key.strip(), raw))
    return pairs


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error naming
    both lines (plain PyYAML keeps the last silently: `total_steps: 2` then `total_steps: 1`,
    or a second `training:` section replacing the first)."""

    source = "config"

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # an unhashable key: let PyYAML's own error name it
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(f"{self.source}: key '{key}' appears twice in one section (lines {seen[key]} and "
                                  f"{line}); keep one of them")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str) -> dict:
    """Read a YAML config file. Every way it can be unreadable becomes one ConfigError naming
    the file (and the line and column where YAML knows them): missing, a folder, not UTF-8,
    malformed, a key given twice, a top level that is not a mapping."""
    if os.path.isdir(path):
        raise ConfigError(f"{path}: is a folder, not a config file (give the path of a .yaml file)")
    if not os.path.exists(path):
        raise ConfigError(f"config file not found: {path}")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                          f"{exc.start}); save the file as UTF-8") from None
    loader = _UniqueKeyLoader(text)
    loader.source = path
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: malformed YAML{where}: {problem}") from None
    finally:
        loader.dispose()
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def config_from_dict(data: dict, overrides: Optional[list[str]] = None) -> Config:
    data = dict(data or {})
    for key, raw in parse_overrides(overrides or []):
        _set_dotted(data, key, raw)
    return build_section(Config, data).finalize()


# Keys that name files or model folders. In a config file, a relative path is read from the
# file's own folder first, then from the working directory (docs/data.md, "Paths"); overrides on
# the command line are relative to the working directory. checkpoint.save_dir is always relative
# to the working directory (outputs land where the command runs).
_PATH_KEYS = (("data", "train_files"), ("data", "val_files"), ("model", "name"), ("model", "tokenizer"),
              ("critic", "name"))


def _from_config_folder(value, base: str):
    """`value` made absolute against `base` when it names something there; else unchanged: a
    hub model name, the working-directory fallback, or a missing file (whose error then names
    the path as written)."""
    if not isinstance(value, str) or not value or os.path.isabs(value) or value.startswith(("tiny:", "~")):
        return value
    candidate = os.path.normpath(os.path.join(base, value))
    return candidate if os.path.exists(candidate) else value


def _function_from_config_folder(spec, base: str):
    """`reward_fn.function: file.py:name` with its file part resolved like _PATH_KEYS."""
    if not isinstance(spec, str) or ":" not in spec:
        return spec
    file_part, name = spec.rsplit(":", 1)
    if not file_part.endswith(".py"):
        return spec  # module:function, imported by name
    return f"{_from_config_folder(file_part, base)}:{name}"


def resolve_relative_paths(data: dict, base: str) -> dict:
    """A config file's relative paths (_PATH_KEYS, reward_fn.function and .model_name, also in
    combined components) resolved against its folder `base`, in place."""
    for section, key in _PATH_KEYS:
        node = data.get(section)
        if not isinstance(node, dict) or key not in node:
            continue
        value = node[key]
        node[key] = ([_from_config_folder(v, base) for v in value] if isinstance(value, list)
                     else _from_config_folder(value, base))
    rewards = [data.get("reward_fn")] if isinstance(data.get("reward_fn"), dict) else []
    while rewards:
        rf = rewards.pop()
        if "function" in rf:
            rf["function"] = _function_from_config_folder(rf["function"], base)
        if isinstance(rf.get("model_name"), str):
            rf["model_name"] = _from_config_folder(rf["model_name"], base)
        rewards += [c for c in rf.get("components") or [] if isinstance(c, dict)]
    return data


def load_config(path: Optional[str] = None, overrides: Optional[list[str]] = None) -> Config:
    """Load a YAML config (or the defaults when `path` is None), apply overrides, validate.
    Relative paths inside the file are read from the file's folder first, then from the
    working directory (see resolve_relative_paths).

    >>> cfg = load_config("config_gpt2.yaml", ["training.lr=1e-5"])
    >>> cfg.training.total_steps
    """
    data = read_yaml(path) if path else {}
    if path:
        data = resolve_relative_paths(data, os.path.dirname(os.path.abspath(path)))
    return config_from_dict(data, overrides)
