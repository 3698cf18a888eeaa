"""A critic with its own tokenizer (e.g. a BERT-style encoder, as the seed suggests).

The critic never sees the actor's token ids. Each sequence is re-rendered as text
(prompt text + decoded response) and tokenized by the critic; values computed on the
critic's tokens are mapped back onto the actor's response tokens by character offsets:

    V(s_t) for actor response token t  =  value at the last critic token that ends at or
    before the first character of actor token t (the [CLS]/first token when none does).

Limits (documented in docs/algorithms.md):
- A bidirectional encoder sees the whole text, including characters after position t, so
  its V(s_t) may use the future; it is a learned baseline, not a causal value function.
  GAE still gives unbiased policy gradients with any baseline, but variance reduction
  is weaker than with a causal critic of the actor's family.
- Where one critic token spans several actor tokens, those actor tokens share a value.
- Text the critic tokenizer cannot represent ([UNK]) still occupies its characters.
"""

from __future__ import annotations

import torch

from verl.batch import Batch
from verl.models.loading import load_tokenizer
from verl.workers.critic import Critic
from verl.workers.optim import autocast_context


def response_char_ends(tokenizer, ids: list[int]) -> tuple[str, list[int]]:
    """Decode `ids` and return (text, end character offset of each token in that text).

    Incremental decoding: end[t] = len(decode(ids[: t + 1])), so multi-byte characters
    split across byte-level tokens are charged to the token that completes them."""
    ends, text = [], ""
    for t in range(len(ids)):
        text = tokenizer.decode(ids[: t + 1], skip_special_tokens=True, clean_up_tokenization_spaces=False)
        ends.append(len(text))
    return text, ends


def map_values_to_actor_tokens(critic_offsets: list[tuple[int, int]], prompt_chars: int, token_ends: list[int],
                               length: int) -> list[int]:
    """For each actor response token, the index of the critic token whose value it takes.

    critic_offsets: (start, end) character spans of the critic tokens over prompt+response
                    text; specials have (0, 0) and are skipped except as the fallback index 0.
    token_ends:     end character (within the response) of each actor response token.
    Returns `length` indices (tokens beyond len(token_ends) get the last index: padding)."""
    real = [(i, e) for i, (s, e) in enumerate(critic_offsets) if e > s]
    out, j, best = [], 0, 0
    starts = [prompt_chars + (token_ends[t - 1] if t > 0 else 0) for t in range(len(token_ends))]
    for start in starts:  # non-decreasing, so one sweep over the critic tokens suffices
        while j < len(real) and real[j][1] <= start:
            best = real[j][0]
            j += 1
        out.append(best)
    return out + [out[-1] if out else 0] * (length - len(out))


class TextCritic(Critic):
    """Critic whose backbone has a different tokenizer or architecture than the actor."""

    def __init__(self, model_cfg, critic_cfg, training_cfg, device: torch.device, micro, *, actor_tokenizer,
                 **kwargs):
        """As `Critic`, plus the actor's tokenizer (responses are re-rendered as text)."""
        super().__init__(model_cfg, critic_cfg, training_cfg, device, micro, **kwargs)
        c = critic_cfg
        self.critic_tokenizer = load_tokenizer(c.name, "critic.name", c.trust_remote_code)
        self.critic_tokenizer.padding_side = "right"
        self.critic_tokenizer.truncation_side = "left"  # keep the response end, where rewards sit
        self.actor_tokenizer = actor_tokenizer
        limit = getattr(self.model.trunk.config, "max_position_embeddings", 512)
        self.max_length = min(limit, 4096)

    @classmethod
    def from_config(cls, config, device: torch.device, actor_tokenizer, **kwargs) -> "TextCritic":
        return super().from_config(config, device, actor_tokenizer=actor_tokenizer, **kwargs)

    def _forward(self, mb: Batch) -> tuple[Batch, torch.Tensor]:
        r = mb.response_length
        texts, maps = [], []
        for i in range(len(mb)):
            n_valid = int(mb.attention_mask[i, mb.prompt_length:].sum())
            ids = mb.responses[i, :n_valid].tolist()
            response, ends = response_char_ends(self.actor_tokenizer, ids)
            texts.append(mb.prompt_text[i] + response)
            maps.append((len(mb.prompt_text[i]), ends))
        enc = self.critic_tokenizer(texts, return_offsets_mapping=True, padding=True, truncation=True,
                                    max_length=self.max_length, return_tensors="pt")
        index = torch.tensor([map_values_to_actor_tokens(enc["offset_mapping"][i].tolist(), p_chars, ends, r)
                              for i, (p_chars, ends) in enumerate(maps)], dtype=torch.long)  # (b, R)
        mb = mb.to(self.device)
        with autocast_context(self.device, self.compute_dtype):
            v = self.model(enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device), None)
        return mb, v.gather(1, index.to(self.device))  # (b, R)
