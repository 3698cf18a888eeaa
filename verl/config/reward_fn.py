"""`reward_fn` section: which reward function scores the responses, with its own settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.config.keys import Section, current_path, key
from verl.errors import ConfigError


@dataclass
class RewardFnConfig(Section):
    SECTION = "reward_fn"
    # string_match | keyword | length_penalty | python | gsm8k | math | number | format |
    # math_dapo | by_data_source | huggingface_rm | api | combined
    type: str = key("string_match", choices="verl.rewards.registry:REWARD_TYPES")
    weight: float = 1.0
    name: Optional[str] = None  # label used in metric names; defaults to type
    target: str = "I love reinforcement learning"  # string_match
    keywords: list[str] = key(factory=list)  # keyword
    target_length: int = key(32, gt=0)  # length_penalty (characters)
    function: Optional[str] = None  # python: "path/to/file.py:function_name"
    kwargs: dict = key(factory=dict)  # python: extra keyword arguments of a real-verl compute_score (reward_kwargs)
    strict: bool = False  # gsm8k: only "#### <n>"
    format_score: float = 0.0  # score for well-formatted but wrong answers
    # huggingface_rm
    model_name: Optional[str] = None
    device: str = key("cpu", resume_safe=True)
    max_length: int = 512
    rm_batch_size: int = key(16, ge=1, resume_safe=True)
    normalize: bool = False
    clip: Optional[float] = key(None, gt=0)  # huggingface_rm: scores clipped to [-clip, clip] (None: off)
    # api
    url: Optional[str] = None
    api_key_env: Optional[str] = key(None, resume_safe=True)
    # seconds one call may take (verl.rewards.deadline): None -> 300 per batch call, 0 = no limit (the
    # function then runs in the calling thread); api: each HTTP request's timeout (None -> 30), the
    # whole call bounded by its worst case
    timeout_s: Optional[float] = key(None, resume_safe=True)
    max_retries: int = key(3, ge=0, resume_safe=True)
    concurrency: int = key(8, gt=0, resume_safe=True)
    on_error: str = key("fail", choices=("fail", "zero"))  # also used when a function raises
    components: list = key(factory=list)  # combined: list of RewardFnConfig

    def __post_init__(self):
        from verl.config.build import build_section
        path = current_path(self.SECTION)
        self.components = [build_section(RewardFnConfig, c, f"{path}.components[{i}]") if isinstance(c, dict) else c
                           for i, c in enumerate(self.components)]  # sections given as plain dicts in Python
        super().__post_init__()

    def validate(self, path: str) -> None:
        if self.timeout_s is not None:
            if self.type == "api":
                if not self.timeout_s > 0:  # each HTTP request's timeout
                    raise ConfigError(f"{path}.timeout_s: must be > 0 for type api (each request's timeout), got "
                                      f"{self.timeout_s}")
            elif self.timeout_s < 0:
                raise ConfigError(f"{path}.timeout_s: must be >= 0, got {self.timeout_s}")  # 0: no limit
        if self.type == "python" and not self.function:
            raise ConfigError(f"{path}.function: required for type python, as 'path/to/file.py:function_name'")
        if self.type == "python" and ":" not in self.function:
            raise ConfigError(f"{path}.function: '{self.function}' must look like 'path/to/file.py:function_name'")
        if self.kwargs and self.type != "python":
            raise ConfigError(f"{path}.kwargs: only for type python (a real-verl compute_score), not {self.type}")
        if self.type == "huggingface_rm" and not self.model_name:
            raise ConfigError(f"{path}.model_name: required for type huggingface_rm")
        if self.type == "api" and not self.url:
            raise ConfigError(f"{path}.url: required for type api")
        if self.type == "api" and not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"{path}.url: '{self.url}' must start with http:// or https://")
        if self.type == "keyword" and not self.keywords:
            raise ConfigError(f"{path}.keywords: required (a non-empty list) for type keyword")
        if self.type == "combined":
            if not self.components:
                raise ConfigError(f"{path}.components: required (a non-empty list) for type combined")
            for i, comp in enumerate(self.components):
                if comp.type == "combined":
                    raise ConfigError(f"{path}.components[{i}].type: components cannot be 'combined' themselves")
                comp.check(f"{path}.components[{i}]")
