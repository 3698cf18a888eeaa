"""`data` section: where prompts come from and how they become model inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.config.keys import Section, at_most, derived, key
from verl.config.rollout import MAX_TOKENS
from verl.errors import ConfigError


@dataclass
class DataConfig(Section):
    SECTION = "data"
    train_files: list[str] = key(factory=list)  # jsonl / parquet paths
    val_files: list[str] = key(factory=list, resume_safe=True)
    # Written by the Python API for in-memory train_dataset / eval_dataset (never read as data):
    # e.g. "datasets.Dataset rows=12 fingerprint=..."; a trainer built from a config that has one
    # needs the data passed again (docs/python_api.md)
    train_source: Optional[str] = None
    val_source: Optional[str] = key(None, resume_safe=True)
    prompts: list = key(factory=list)  # inline prompts (strings)
    # A user's dataset class reading the files, 'file.py:ClassName' or 'package.module:ClassName' (real verl's
    # data.custom_cls): built with real verl's RLHFDataset arguments, its items become the rows
    # (verl/data/custom_dataset.py)
    dataset_class: Optional[str] = None
    # A user's sampler deciding the order of training prompts, named alike (real verl's data.sampler): a
    # curriculum sampler's update(batch) runs after every step (verl/data/custom_sampler.py)
    sampler_class: Optional[str] = None
    prompt_key: str = "prompt"
    answer_key: str = "answer"
    # Vision-language data (docs/vision_language.md): the column of each row's images (a list of PIL images,
    # {"bytes", "path"} dicts or paths; one "<image>" marker per image in the prompt); rows without it are
    # text only. min_pixels / max_pixels: the image processor's resize bounds (None: the processor's own)
    image_key: str = "images"
    min_pixels: Optional[int] = key(None, ge=1)
    max_pixels: Optional[int] = key(None, ge=1)
    apply_chat_template: bool = True  # when the tokenizer has one
    # extra arguments of the chat template, e.g. {enable_thinking: false} for Qwen3 (real verl's
    # data.apply_chat_template_kwargs); the template reads them, a template that does not ignores them
    chat_template_kwargs: dict = key(factory=dict)
    system_prompt: Optional[str] = None
    max_prompt_length: int = key(128, ge=1)
    truncation: str = key("filter", choices=("filter", "left", "right", "error"))
    shuffle: bool = True
    val_n: int = key(1, ge=1, resume_safe=True)  # samples per validation prompt (mean@n)
    # the sampled validation pass: with val_n > 1 always, with val_n = 1 when val_do_sample (mean@1_sampled);
    # its temperature / top_p / top_k (None: the training rollout's), as real verl's rollout.val_kwargs
    val_do_sample: bool = key(False, resume_safe=True)
    val_temperature: Optional[float] = key(None, gt=0, resume_safe=True)
    val_top_p: Optional[float] = key(None, gt=0, resume_safe=True)
    val_top_k: Optional[int] = key(None, ge=0, resume_safe=True)  # 0 = off
    val_max_samples: int = key(256, resume_safe=True)
    baseline_prompt: Optional[str] = key("Explain reinforcement learning in one sentence.", resume_safe=True)
    # the YAML file the config came from ('' for none): a missing data file's error says where relative paths
    # were looked for (verl/config/paths.py reads them from that file's folder first, then the working directory)
    config_file: str = derived("")

    def validate(self, path: str) -> None:
        from verl.data.user_class import split_spec

        for name in ("dataset_class", "sampler_class"):
            if getattr(self, name) is not None:
                split_spec(getattr(self, name), f"{path}.{name}")
        at_most(self.max_prompt_length, MAX_TOKENS, f"{path}.max_prompt_length", "no model's context is that long")
        if self.min_pixels is not None and self.max_pixels is not None and self.min_pixels > self.max_pixels:
            raise ConfigError(f"{path}.min_pixels ({self.min_pixels}) is more than {path}.max_pixels "
                              f"({self.max_pixels})")
