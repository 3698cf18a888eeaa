"""`huggingface_rm`: a sequence-classification reward model (local folder or hub name).

The reward model keeps ITS OWN tokenizer: the actor's prompt and response text is
re-rendered for it (`render_for_rm`) and re-tokenized, so actor and RM may have
different vocabularies and chat templates. Rendering:

  * the RM tokenizer has a chat template -> [user: prompt, assistant: response] through it
    (a list of messages in sample['extra']['raw_prompt'] is used as the conversation,
    so the actor's own template is not nested inside the RM's);
  * otherwise -> the plain text prompt + response.

Tokens beyond `max_length` are cut from the left (the end of the response is kept).
Score = the logit when num_labels == 1, else the logit of the last label. Optionally
normalised with running mean/std over every score seen so far (`normalize`), then
clipped to [-clip, clip] (`clip`). Loaded lazily on first use; eval mode, no grad.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

import math


import torch

from verl.rewards.base import RewardFn


def render_for_rm(tokenizer, prompt, response: str) -> tuple[str, bool]:
    """(text, used_chat_template). `prompt` is a string or a list of chat messages."""
    if getattr(tokenizer, "chat_template", None):
        messages = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
        messages.append({"role": "assistant", "content": response})
        return tokenizer.apply_chat_template(messages, tokenize=False), True
    if isinstance(prompt, list):
        prompt = "\n".join(str(m.get("content", "")) for m in prompt)
    return str(prompt) + response, False


def load_rm_tokenizer(name: str):
    """The RM's tokenizer, with a pad token and left truncation (keep the end)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    tokenizer.truncation_side = "left"
    return tokenizer


def encode_for_rm(tokenizer, texts: list, templated: bool, max_length: int) -> dict:
    # A chat template already writes its special tokens into the text.
    return tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt",
                     add_special_tokens=not templated)


def rm_scores(logits: torch.Tensor) -> torch.Tensor:
    """(b, num_labels) -> (b,): the single logit, or the last label's logit."""
    return logits[:, 0] if logits.shape[-1] == 1 else logits[:, -1]


class RunningMeanStd:
    """Mean and std of every value seen so far (Chan et al. parallel update)."""

    def __init__(self):
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    def update(self, values: torch.Tensor) -> None:
        n = values.numel()
        if n == 0:
            return
        b_mean = values.mean().item()
        b_m2 = ((values - b_mean) ** 2).sum().item()
        delta, total = b_mean - self.mean, self.count + n
        self.mean += delta * n / total
        self.m2 += b_m2 + delta ** 2 * self.count * n / total
        self.count = total

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.count) if self.count > 1 else 0.0


class HFRewardModel:
    """Batch reward function backed by AutoModelForSequenceClassification."""

    isolate_errors = False  # a failure is the model's, not one sample's: don't re-run per sample

    def __init__(self, cfg: RewardFnConfig):
        self.cfg = cfg
        self.model = None
        self.tokenizer = None
        self.stats = RunningMeanStd()
        self.__name__ = f"huggingface_rm({cfg.model_name})"

    def load(self) -> None:
        if self.model is not None:
            return
        from transformers import AutoModelForSequenceClassification

        from verl.models.loading import load_error, model_path

        device = torch.device(self.cfg.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"reward_fn.device: '{self.cfg.device}' requested but CUDA is not available")
        key = "reward_fn.model_name"
        name = model_path(self.cfg.model_name, key)  # a hub name without a hub fails in seconds
        try:
            self.tokenizer = load_rm_tokenizer(name)
            model = AutoModelForSequenceClassification.from_pretrained(name)
        except Exception as exc:  # noqa: BLE001 - one line naming the key and the broken file
            raise load_error(exc, self.cfg.model_name, name, key, "a reward model") from None
        if model.config.pad_token_id is None:
            model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model = model.to(device).eval()
        self.device = device

    def texts(self, prompts, responses, samples) -> tuple[list, bool]:
        out, templated = [], False
        for p, r, s in zip(prompts, responses, samples):
            raw = (s.get("extra") or {}).get("raw_prompt")
            text, templated = render_for_rm(self.tokenizer, raw if raw is not None else p, r)
            out.append(text)
        return out, templated

    @torch.no_grad()
    def raw_scores(self, prompts, responses, samples) -> torch.Tensor:
        self.load()
        texts, templated = self.texts(prompts, responses, samples)
        out = []
        for i in range(0, len(texts), self.cfg.rm_batch_size):
            enc = encode_for_rm(self.tokenizer, texts[i:i + self.cfg.rm_batch_size], templated, self.cfg.max_length)
            logits = self.model(**{k: v.to(self.device) for k, v in enc.items()}).logits
            out.append(rm_scores(logits).float().cpu())
        return torch.cat(out) if out else torch.zeros(0)

    def __call__(self, prompts, responses, samples) -> list:
        scores = self.raw_scores(prompts, responses, samples)
        if self.cfg.normalize:
            self.stats.update(scores)
            scores = scores - self.stats.mean
            if self.stats.std > 1e-6:
                scores = scores / self.stats.std
        if self.cfg.clip is not None:
            scores = scores.clamp(-self.cfg.clip, self.cfg.clip)
        return scores.tolist()


def build_huggingface_rm(cfg: RewardFnConfig) -> RewardFn:
    return HFRewardModel(cfg)  # the section checked model_name, rm_batch_size and clip
