"""Helpers shared by the multi-turn tests: a tool, an environment, a scripted engine and chat-template prompts."""

from __future__ import annotations

import torch

from verl.agents.environment import Environment, StepResult
from verl.batch import Batch
from verl.rollout.base import RolloutEngine, SamplingParams


def add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return str(a + b)


class Counter(Environment):
    """Answers every turn with the turn number; reward 1 on the third turn, then done."""

    def reset(self, sample):
        self.k = 0
        return ""

    def step(self, action_text):
        self.k += 1
        if self.k == 3:
            return StepResult("done", reward=1.0, done=True)
        return StepResult(f"turn {self.k}", reward=0.25)


class ScriptedEngine(RolloutEngine):
    """Answers each call with the next scripted token list per row and log-prob -0.5 per token;
    records the contexts it was given (to check that nothing was re-encoded)."""

    def __init__(self, tokenizer, script: list[list[list[int]]]):
        self.tokenizer, self.script, self.contexts = tokenizer, list(script), []

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        from verl.rollout.base import assemble_rollout

        turn = self.script.pop(0)
        self.contexts.append([prompts.input_ids[i][prompts.attention_mask[i] > 0].tolist() for i in range(len(prompts))])
        responses = [turn[i] for i in range(len(prompts))]
        return assemble_rollout(prompts, responses, [[-0.5] * len(r) for r in responses], self.tokenizer,
                                sampling.max_new_tokens, finished=[True] * len(responses))


def _enc(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def _prompts(tok, texts, template_kwargs=None):
    """A left-padded prompt Batch of `texts` (each a user message, or a list of chat messages), rendered
    the way verl/data/prompts.py renders them (generation prompt, no extra special tokens)."""
    convs = [[{"role": "user", "content": t}] if isinstance(t, str) else list(t) for t in texts]
    ids = [_enc(tok, tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True, **(template_kwargs or {})))
           for c in convs]
    width = max(len(i) for i in ids)
    input_ids = torch.full((len(ids), width), tok.pad_token_id, dtype=torch.long)
    att = torch.zeros((len(ids), width), dtype=torch.long)
    for b, s in enumerate(ids):
        input_ids[b, width - len(s):] = torch.tensor(s)
        att[b, width - len(s):] = 1
    prompt_text = [t if isinstance(t, str) else t[-1]["content"] for t in texts]
    return Batch(input_ids=input_ids, attention_mask=att, prompt_text=prompt_text, ground_truth=[None] * len(texts),
                 data_source=["t"] * len(texts), extra=[{} for _ in texts], group_id=list(range(len(texts)))), ids
