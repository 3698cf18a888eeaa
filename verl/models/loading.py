"""Loading tokenizers and causal LMs from a hub name, a local folder, a GGUF file or `tiny:<arch>`.

Errors are one line naming the config key (`model.name`, `critic.name`, `reward_fn.model_name`):
a path that does not exist; a hub name with no hub and no cached copy (decided in seconds,
verl/models/hub.py); a broken file of the folder, named (verl/models/folder_check.py); a model
that ships its own code while that role's `trust_remote_code` key is off, naming that key.
`check_context_length` refuses, before any weights load, prompt + response lengths beyond the
model's positions. A stop request (SIGINT/SIGTERM) before a load ends the run there.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from verl.errors import ConfigError
from verl.models.tiny import resolve_model_name

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_CHOICES = ("auto", *DTYPES)  # model.dtype: auto is resolved by the config (verl.config.root)


class ModelLoadError(ConfigError):
    """A model or tokenizer could not be loaded; the message names the config key."""


def quiet_transformers() -> None:
    """No per-load progress bars from transformers: verl prints its own progress."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: '{name}' was asked for but no CUDA GPU is visible (use device: cpu or auto)")
    return torch.device(name)


def torch_dtype(name: str) -> torch.dtype:
    return DTYPES[name]


def model_path(name: str, key: str) -> str:
    """What from_pretrained gets for `name`: a local folder (tiny: and fetched short names
    resolved), or a hub id that is loadable now (verl/models/hub.py). Errors name `key`."""
    path = resolve_model_name(name)
    expanded = os.path.expanduser(path)
    if os.path.exists(expanded):
        return expanded
    looks_local = path.startswith((".", "/", "~")) or os.sep in path.strip("/").split("/", 1)[-1]
    if looks_local:
        raise ModelLoadError(f"{key}: '{name}' does not exist (expected a local model folder or a hub name)")
    from verl.models.hub import resolve_hub_name

    return resolve_hub_name(path, key)


_path_or_hub = model_path  # the older name, used by the critic


def _stop_before_loading(key: str, name: str) -> None:
    """A stop request that came while earlier models loaded ends the run before the next load."""
    from verl.signals import StopTraining, stop_requested

    if stop_requested():
        raise StopTraining(f"stopped by {stop_requested()} while loading the models (before {key} '{name}'); "
                           "nothing was trained yet, so there is nothing to save")


def load_error(exc: BaseException, name: str, path: str, key: str, what: str,
               trust_key: str | None = None, trust_note: str = "") -> BaseException:
    """The error to raise for a failed from_pretrained of `what` ("a tokenizer", "a causal LM")
    from `name` (at `path`): a ModelLoadError naming `key` and, where it can tell, the broken
    file or the `trust_key` that would let the model's own code run; the original exception for
    running out of memory and for failures it cannot attribute to the model files."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "out of memory" in text.lower() or type(exc).__name__ == "OutOfMemoryError":
        return exc
    from verl.models.folder_check import broken_file

    broken = broken_file(path)
    if broken:
        return ModelLoadError(f"{key}: cannot load {what} from '{name}': {broken}")
    if trust_key and "trust_remote_code" in str(exc):
        return ModelLoadError(f"{trust_key}: '{name}' ships its own model code (auto_map in its config.json), which "
                              f"runs only with {trust_key}: true; set it if you trust that code{trust_note}")
    if isinstance(exc, (OSError, ValueError)) or "safetensor" in type(exc).__name__.lower():
        return ModelLoadError(f"{key}: cannot load {what} from '{name}': {text}")
    return exc


def load_tokenizer(name: str, key: str = "model.name", trust_remote_code: bool = False, gguf_file=None,
                   trust_key: str | None = None):
    """Tokenizer with a pad token (EOS when it has none) and left padding for generation.
    `trust_key`: the config key of `trust_remote_code` (default: the section of `key`'s)."""
    from verl.signals import phase

    _stop_before_loading(key, name)
    path = model_path(name, key)  # before importing transformers: a hub name without a hub fails in a second
    if not gguf_file and is_vision_language(name, key, trust_remote_code, path):
        # A vision-language model: its processor's tokenizer, the processor attached for the prompts with
        # images (verl.data.vl_prompts.processor_of) and for the saved model folders.
        processor = load_processor(name, key, trust_remote_code)
        processor.tokenizer.verl_processor = processor
        return processor.tokenizer
    from transformers import AutoTokenizer

    quiet_transformers()
    kwargs = {"trust_remote_code": trust_remote_code}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    try:
        with phase(f"loading the tokenizer of {key} '{name}'"):
            tok = AutoTokenizer.from_pretrained(path, **kwargs)
    except Exception as exc:  # noqa: BLE001 - named one-line errors; the rest re-raised as they are
        raise load_error(exc, name, path, key, "a tokenizer", trust_key or key.split(".")[0] + ".trust_remote_code",
                         ) from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def attn_implementation(model_cfg, device_type: str | None = None, dtype: str | None = None) -> str:
    """The transformers attention implementation for `model.attn_implementation` on a device of
    type `device_type` ("cpu", "cuda"; None: not the CPU). auto: "sdpa", except "eager" for a
    bfloat16/float16 model on the CPU: there SDPA's flash kernel runs the backward ~2.5x slower
    than eager attention's batched matmuls (16 x 104-token rows, 9 heads: 66 vs 26 ms a layer).
    `dtype`: the compute dtype when not `model.dtype` (the critic's `critic.dtype`)."""
    name = "flash_attention_2" if model_cfg.use_flash_attention else model_cfg.attn_implementation
    if name == "auto":
        return "eager" if device_type == "cpu" and (dtype or model_cfg.dtype) in ("bfloat16", "float16") else "sdpa"
    if name == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        key = "model.use_flash_attention: true" if model_cfg.use_flash_attention else \
            "model.attn_implementation: flash_attention_2"
        raise ConfigError(f"{key} needs the flash-attn package (pip install flash-attn); "
                          "use sdpa (PyTorch's attention) instead")
    return name


def load_causal_lm(model_cfg, dtype: torch.dtype, key: str = "model.name", name: str | None = None,
                   device_type: str | None = None):
    """A Hugging Face causal LM in `dtype`, dropout off (RL recomputes log-probs and needs
    train-mode and eval-mode forwards to agree); attention per `attn_implementation` for a
    model that will run on `device_type`."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from verl.signals import phase

    name = name or model_cfg.name
    _stop_before_loading(key, name)
    path = model_path(name, key)
    kwargs = dict(dtype=dtype, trust_remote_code=model_cfg.trust_remote_code,
                  attn_implementation=attn_implementation(model_cfg, device_type))
    try:
        with phase(f"loading {key} '{name}'"):
            if model_cfg.override_config:  # the config read, overridden (model_max_positions checked the fields)
                from transformers import AutoConfig

                config = AutoConfig.from_pretrained(path, trust_remote_code=model_cfg.trust_remote_code)
                kwargs["config"] = override_config(config, model_cfg.override_config)
            if model_cfg.gguf_file:
                from verl.models.gguf import load_gguf_model

                model = load_gguf_model(path, model_cfg.gguf_file, dtype)
            else:  # a vision-language checkpoint (vision_config in its config.json): the image-text-to-text class
                auto = AutoModelForImageTextToText if is_vision_language(name, key, model_cfg.trust_remote_code, path) \
                    else AutoModelForCausalLM
                model = auto.from_pretrained(path, **kwargs)
    except Exception as exc:  # noqa: BLE001 - named one-line errors; the rest re-raised as they are
        if model_cfg.override_config and "mismatched_sizes" in str(exc):  # e.g. GPT-2's learned positions
            raise ModelLoadError(f"model.override_config: {', '.join(model_cfg.override_config)} changes the shape "
                                 f"of weights the {key} checkpoint holds (it no longer fits); only fields that "
                                 "leave the weights as they are can be overridden") from None
        raise load_error(exc, name, path, key, "a causal LM", "model.trust_remote_code") from None
    disable_dropout(model)
    return model


POSITION_KEYS = ("n_positions", "max_position_embeddings", "max_sequence_length", "seq_length", "n_ctx")


def override_config(config, overrides: dict):
    """`config` (a transformers config) with the fields of `overrides` replaced (model.override_config); a
    field found only on its text config (a vision-language model's) is set there. An unknown field is a
    ConfigError: a misspelt override would otherwise be ignored by transformers."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for field, value in overrides.items():
        owner = config if hasattr(config, field) else text if hasattr(text, field) else None
        if owner is None:
            raise ConfigError(f"model.override_config.{field}: not a field of the model's config "
                              f"({type(config).__name__})")
        setattr(owner, field, value)
    return config


def model_max_positions(name: str, key: str = "model.name", trust_remote_code: bool = False,
                        gguf_file=None, overrides: dict | None = None) -> tuple[int | None, str | None]:
    """(the most positions the model's config allows, the config field that says so), read from
    its config alone (no weights); (None, None) when the config does not say or cannot be read
    here (loading the model then reports why)."""
    from transformers import AutoConfig

    path = model_path(name, key)
    kwargs = {"trust_remote_code": trust_remote_code}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    try:
        config = AutoConfig.from_pretrained(path, **kwargs)
    except Exception:  # noqa: BLE001 - the model load that follows names the problem
        return None, None
    if overrides:
        config = override_config(config, overrides)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    saved = text.to_dict()  # the names as written in config.json (GPT-2's n_positions, not its alias), overridden
    for field in POSITION_KEYS:
        value = saved.get(field, getattr(text, field, None))
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, field
    return None, None


def check_context_length(cfg) -> None:
    """data.max_prompt_length + rollout.max_new_tokens must fit the actor's positions: beyond them a
    model with learned position embeddings fails deep inside generation (`IndexError: index out of
    range in self`) and a rotary one runs where it was never trained. One ConfigError naming both
    keys and the model's limit, before any weights load."""
    m = cfg.model
    limit, field = model_max_positions(m.name, "model.name", m.trust_remote_code, m.gguf_file, m.override_config)
    r = cfg.rollout
    budget_key = "rollout.multi_turn.max_total_tokens" if r.is_multi_turn else "rollout.max_new_tokens"
    need = cfg.data.max_prompt_length + r.response_budget
    check_vision_language(cfg)
    check_moe(cfg)
    if limit is not None and need > limit:
        raise ModelLoadError(
            f"data.max_prompt_length ({cfg.data.max_prompt_length}) + {budget_key} "
            f"({r.response_budget}) = {need} tokens is more than model.name '{m.name}' takes "
            f"({field} = {limit} in its config.json); lower one of them so that the sum is at most {limit}")


def disable_dropout(model: torch.nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


# ---------------------------------------------------------------------------
# Vision-language models (docs/vision_language.md)
# ---------------------------------------------------------------------------


def is_vision_language(name: str, key: str = "model.name", trust_remote_code: bool = False,
                       path: str | None = None) -> bool:
    """Whether `name`'s config.json (at `path` when resolved already) describes a vision-language model
    (it has a `vision_config`)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path or model_path(name, key), trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - the model load that follows names the problem
        return False
    return getattr(config, "vision_config", None) is not None


def moe_experts(name: str, key: str = "model.name", trust_remote_code: bool = False) -> int:
    """The number of routed experts `name`'s config.json declares (num_experts, num_local_experts), 0 for
    a dense model (or one whose config cannot be read here: the model load names that problem)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_path(name, key), trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - the model load that follows names the problem
        return 0
    config = getattr(config, "text_config", None) or config
    return int(getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None) or 0)


def check_moe(cfg) -> None:
    """The MoE keys need an MoE model: one line naming the key before any weights load (docs/moe.md)."""
    asked = [(k, on) for k, on in (("training.router_aux_loss_coef", cfg.training.router_aux_loss_coef > 0),
                                   ("rollout.routing_replay", cfg.rollout.routing_replay != "off")) if on]
    if not asked or cfg.model.gguf_file:
        return
    m = cfg.model
    if not moe_experts(m.name, "model.name", m.trust_remote_code):
        key_name = asked[0][0]
        raise ConfigError(f"{key_name}: for mixture-of-experts models; model.name '{m.name}' declares no experts "
                          "(num_experts / num_local_experts in its config.json)")


def _processor_class_name(path: str) -> str | None:
    """The processor class a model folder names (processor_config.json, or preprocessor_config.json as
    hub folders have it), or None."""
    import json

    for file in ("processor_config.json", "preprocessor_config.json"):
        full = os.path.join(path, file)
        if os.path.exists(full):
            with open(full) as fh:
                name = json.load(fh).get("processor_class")
            if name:
                return name
    return None


def _processor_without_video(path: str, trust_remote_code: bool):
    """The processor of `path` built from its parts, without a video processor: transformers' Qwen2-VL
    family video processors need torchvision, which the image-only path does not (the PIL image
    processor is used). Only for a processor class whose video processor may be None."""
    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer
    from transformers.processing_utils import ProcessorMixin

    base = getattr(transformers, _processor_class_name(path))

    class ImageOnly(base):  # the proper-class check looks the absent video processor class up: skip None
        def check_argument_for_proper_class(self, argument_name, argument):
            return None if argument is None else ProcessorMixin.check_argument_for_proper_class(
                self, argument_name, argument)

    ImageOnly.__name__ = base.__name__
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    images = AutoImageProcessor.from_pretrained(path, trust_remote_code=trust_remote_code)
    return ImageOnly(image_processor=images, tokenizer=tok, video_processor=None,
                     chat_template=tok.chat_template or _folder_chat_template(path))


def _folder_chat_template(path: str) -> str | None:
    """The processor's chat template a folder keeps beside the tokenizer's: chat_template.jinja or
    chat_template.json ({"chat_template": ...}, hub Qwen2-VL folders)."""
    import json

    if os.path.exists(os.path.join(path, "chat_template.jinja")):
        with open(os.path.join(path, "chat_template.jinja")) as fh:
            return fh.read()
    if os.path.exists(os.path.join(path, "chat_template.json")):
        with open(os.path.join(path, "chat_template.json")) as fh:
            return json.load(fh).get("chat_template")
    return None


def load_processor(name: str, key: str = "model.name", trust_remote_code: bool = False):
    """The AutoProcessor of the vision-language model `name` (its tokenizer: `processor.tokenizer`, with a
    pad token and left padding like load_tokenizer's). Without torchvision, a processor whose only
    torchvision part is the video processor is built without it (images only)."""
    from transformers import AutoProcessor

    _stop_before_loading(key, name)
    path = model_path(name, key)
    quiet_transformers()
    try:
        try:
            processor = AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code)
        except ImportError as exc:
            if "torchvision" not in str(exc).lower() or not _processor_class_name(path):
                raise
            processor = _processor_without_video(path, trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - named one-line errors; the rest re-raised as they are
        raise load_error(exc, name, path, key, "a processor", key.split(".")[0] + ".trust_remote_code") from None
    tok = processor.tokenizer
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    if getattr(tok, "chat_template", None) is None and getattr(processor, "chat_template", None):
        tok.chat_template = processor.chat_template  # a hub folder may keep it in chat_template.json only
    processor.verl_source = path  # save_tokenizer_files copies its processor_config.json where needed
    return processor


def save_tokenizer_files(tokenizer, path: str) -> None:
    """The tokenizer's files into the model folder `path`, and for a vision-language model's tokenizer
    its processor's (image processor, processor_config.json): the folder then loads again as a VL model
    with its processor. A processor built without its video processor (no torchvision) cannot save
    itself: its image processor is saved and the source folder's processor_config.json copied."""
    tokenizer.save_pretrained(path)
    processor = getattr(tokenizer, "verl_processor", None)
    if processor is None:
        return
    try:
        processor.save_pretrained(path)
    except AttributeError:  # the absent video processor
        import shutil

        processor.image_processor.save_pretrained(path)
        source = os.path.join(getattr(processor, "verl_source", ""), "processor_config.json")
        if os.path.exists(source):
            shutil.copyfile(source, os.path.join(path, "processor_config.json"))


def check_vision_language(cfg) -> None:
    """What a vision-language actor (model.name's config.json has a vision_config) cannot do yet, refused
    before any weights load with one line naming the key (docs/vision_language.md)."""
    m = cfg.model
    if m.gguf_file or not is_vision_language(m.name, "model.name", m.trust_remote_code):
        if m.freeze_vision_tower:
            raise ConfigError(f"model.freeze_vision_tower: true, but model.name '{m.name}' has no vision tower "
                              "(not a vision-language model); set it to false")
        return
    from verl.algorithms.requirements import needs_critic

    why = {
        "distributed.backend": (cfg.distributed.backend == "ray", "ray: the Ray/FSDP workers' forwards do not "
                                "take images yet; use distributed.backend: none"),
        "algorithm.adv_estimator": (needs_critic(cfg.algorithm) or cfg.critic.share_actor,
                                    f"{cfg.algorithm.adv_estimator} needs a critic, whose value model does not "
                                    "take images yet; use a critic-free estimator (grpo, rloo, reinforce_plus_plus, "
                                    "...)"),
        "training.use_packed_samples": (bool(cfg.training.use_packed_samples) and not cfg.training.packed_by_default,
                                        "true: packed micro-batches (one row of several sequences) cannot carry "
                                        "their images; set it to false (padded micro-batches)"),
        # verl's SGLang backend sends token ids only (no images, no check that SGLang's processor expands a
        # prompt as the actor's does)
        "rollout.name": (cfg.rollout.name == "sglang", "sglang does not run vision-language models in verl; use "
                         "rollout.name: vllm or rollout.name: hf"),
        "async_training.partial_rollout": (cfg.async_training.partial_rollout,
                                           "true: resumed partial responses do not carry the prompt's images yet; "
                                           "set it to false"),
    }
    for key_name, (refused, reason) in why.items():
        if refused:
            raise ConfigError(f"{key_name}: {reason} (model.name '{m.name}' is a vision-language model)")

