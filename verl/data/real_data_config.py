"""Real verl's `data` config, as a user's dataset or sampler class reads it, built from ours.

Real verl constructs such classes with its `data` section (an OmegaConf DictConfig): `config.get("prompt_key",
"prompt")`, `config.max_prompt_length`, `config.custom_cls.path`, `"custom_cls" in config`. `RealDataConfig` is a
dict with those three ways of reading; `real_data_config(data_cfg, ...)` fills it with real verl's names for
our values (data.truncation=filter is real verl's truncation=error with filter_overlong_prompts=True). A key
it does not hold reads as `.get`'s default, and as an AttributeError naming the key by attribute (as a
DictConfig in struct mode raises), so a class that needs a key we do not have fails with that key's name.
"""

from __future__ import annotations

from typing import Any, Optional

from verl.data.user_class import is_file, split_spec


class RealDataConfig(dict):
    """A dict read as a DictConfig: cfg.key, cfg.get(key, default), key in cfg; nested dicts alike."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(f"real verl's data config as given here has no key '{name}'") from None
        return RealDataConfig(value) if isinstance(value, dict) and not isinstance(value, RealDataConfig) else value

    def get(self, name: str, default: Any = None) -> Any:
        value = super().get(name, default)
        return RealDataConfig(value) if isinstance(value, dict) and not isinstance(value, RealDataConfig) else value


def _path_and_name(spec: Optional[str], key: str) -> tuple[Optional[str], Optional[str]]:
    """Our 'where:Name' as real verl's (path, name); a module becomes its pkg:// form."""
    if not spec:
        return None, None
    where, name = split_spec(spec, key)
    return (where if is_file(where) else f"pkg://{where}"), name


def real_data_config(data_cfg, seed: Optional[int] = None, batch_size: Optional[int] = None,
                     max_response_length: Optional[int] = None) -> RealDataConfig:
    """Real verl's data section for our DataConfig (and the run's seed, prompts per step, response length)."""
    cls_path, cls_name = _path_and_name(data_cfg.dataset_class, "data.dataset_class")
    sampler_path, sampler_name = _path_and_name(data_cfg.sampler_class, "data.sampler_class")
    filtering = data_cfg.truncation == "filter"
    pixels = {k: v for k, v in (("min_pixels", data_cfg.min_pixels), ("max_pixels", data_cfg.max_pixels))
              if v is not None}
    return RealDataConfig({
        "train_files": list(data_cfg.train_files), "val_files": list(data_cfg.val_files),
        "prompt_key": data_cfg.prompt_key, "reward_fn_key": "data_source",
        "image_key": data_cfg.image_key, "video_key": "videos", "audio_key": "audios",
        "max_prompt_length": data_cfg.max_prompt_length, "max_response_length": max_response_length,
        "train_batch_size": batch_size, "val_batch_size": None, "gen_batch_size": batch_size,
        "truncation": "error" if filtering else data_cfg.truncation, "filter_overlong_prompts": filtering,
        "filter_overlong_prompts_workers": 1, "dataloader_num_workers": 0, "use_shm": False,
        "return_raw_input_ids": False, "return_raw_chat": True, "return_full_prompt": False,
        "return_multi_modal_inputs": True, "shuffle": data_cfg.shuffle, "validation_shuffle": False,
        "seed": seed, "train_max_samples": -1, "val_max_samples": -1, "trust_remote_code": False,
        "apply_chat_template_kwargs": dict(data_cfg.chat_template_kwargs), "mm_processor_kwargs": pixels,
        "tool_config_path": None, "function_tool_path": None, "image_patch_size": 14,
        "custom_cls": {"path": cls_path, "name": cls_name},
        "sampler": {"class_path": sampler_path, "class_name": sampler_name},
    })
