"""The rollout engine interface and the one function that turns sampled token lists
into a `Batch`, shared by every backend so nothing downstream knows which one ran.

An engine sees token ids only: prompts arrive tokenized and left-padded, responses go
back as ids plus the engine's own per-token log-probs.
"""

from __future__ import annotations

import abc
import itertools
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from verl.batch import Batch
from verl.rollout.token_io import pad_id


@dataclass
class SamplingParams:
    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    n: int = 1  # samples per prompt
    stop: list = field(default_factory=list)  # stop strings (the stop text stays in the response)
    seed: Optional[int] = None
    # The step's seed for engines that draw with torch (HF): their draws come from a torch.Generator of
    # their own seeded with it, so no thread touches torch's global generator to sample (None: the global
    # one; verl's own decode loop keeps the device's global generator, which its CUDA graphs capture)
    draw_seed: Optional[int] = None
    greedy: bool = False  # overrides temperature/top_p/top_k (ReMax baseline, validation)
    # The caller reads rollout_log_probs. False lets an engine skip them (vLLM does: rollout_log_probs
    # None); validation and the steps rollout.logprob_check_every skips set it
    log_probs: bool = True

    @property
    def is_greedy(self) -> bool:
        """Argmax decoding: asked for (greedy), or implied by temperature 0 (every engine's reading)."""
        return self.greedy or self.temperature == 0

    @classmethod
    def from_config(cls, rollout_cfg) -> "SamplingParams":
        return cls(max_new_tokens=rollout_cfg.max_new_tokens, temperature=rollout_cfg.temperature,
                   top_p=rollout_cfg.top_p, top_k=rollout_cfg.top_k, n=rollout_cfg.n,
                   stop=list(rollout_cfg.stop), seed=rollout_cfg.seed)


class RolloutEngine(abc.ABC):
    """Generates responses for a prompt Batch.

    `generate(prompts, sampling)` takes a Batch with `input_ids`/`attention_mask` of shape
    (B, P) (left-padded prompts) and the per-prompt list fields, and returns a Batch of
    B * n rows laid out as documented in `verl.batch` (samples of one prompt adjacent,
    sharing `group_id`), with `rollout_log_probs` filled by the engine.
    """

    @abc.abstractmethod
    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch: ...

    def sync_weights(self, model: torch.nn.Module) -> dict:
        """Push the actor's current weights into the engine; returns metrics (seconds, bytes).
        Engines that generate with the actor's own module need not do anything."""
        return {}

    def sleep(self) -> None:
        """Release generation memory (KV cache) while the actor trains."""

    def wake_up(self) -> None:
        """Re-acquire generation memory before the next `generate`."""

    def can_sleep(self) -> bool:
        """Whether `sleep` frees device memory (an engine with a sleep mode that is on): none here."""
        return False

    def unbacked_bytes(self) -> int:
        """Bytes this process's torch allocator counts as allocated that have no device memory behind
        them now: an in-process engine's memory pool released by sleep mode. The per-stage memory figures
        (verl/trainer/stage_memory.py) subtract them. Engines in other processes or without sleep: 0."""
        return 0

    def metrics(self) -> dict:
        """Metrics of the last `generate` beyond the Batch itself (e.g. agent/* of multi-turn rollouts)."""
        return {}

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the engine: nothing. Its weights are the actor's (synced
        after a restore) and its sampling is seeded from (seed, step) at each step."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """See state_dict: there is nothing to restore."""


def assemble_rollout(prompts: Batch, responses: Sequence[Sequence[int]],
                     log_probs: Optional[Sequence[Sequence[float]]], tokenizer, max_new_tokens: int,
                     finished: Optional[Sequence[bool]] = None) -> Batch:
    """Build the rollout Batch from per-sequence response token lists.

    prompts:   Batch of N rows (already repeated n times per prompt), input_ids (N, P)
    responses: N lists of generated ids (EOS included when the engine stopped on it)
    log_probs: N lists, same lengths, log-prob of each generated id under the engine; None when
               the engine skipped them (SamplingParams.log_probs False): rollout_log_probs None
    finished:  N flags, True if the sequence ended on EOS or a stop string (not on length);
               None -> inferred from EOS.
    Returns input_ids (N, P + R) with R = longest response, response_mask 1 on generated
    tokens (EOS included) and 0 on right padding, and position ids that count real tokens.
    """
    n = len(responses)
    pad = pad_id(tokenizer)
    lengths = [len(r) for r in responses]
    for i, (k, lps) in enumerate(zip(lengths, log_probs or ())):
        if k != len(lps):
            raise ValueError(f"rollout sample {i}: {k} tokens but {len(lps)} log-probs")
    resp_len = max(1, max(lengths, default=1))
    # One flat array per field, scattered through the (N, R) mask (row-major order = concatenation
    # order): a tensor per row cost ~36 ms for 256 x 256 tokens on a 2-core CPU, this ~10 ms. The flat
    # arrays come from numpy.fromiter with the count known (for 1024 x 256 tokens 11 ms a field
    # against 20 ms for torch.tensor(list(chain)), which builds a list first). The arrays are built
    # in numpy, single-threaded, and handed to torch without a copy: torch's own masked scatter, cat
    # and cumsum run on its OpenMP pool, whose threads wait for each other at every op, and beside an
    # engine's busy processes (SGLang's scheduler spins on a core) and the tokenizer's own pool that
    # wait costs more than the op (256 x 256 tokens on 2 cores with one busy neighbour, medians of
    # benchmarks/rollout_readout.py --busy 1: 0.0645 s with torch's ops, 0.0438 s this way).
    filled = np.arange(resp_len)[None, :] < np.asarray(lengths, dtype=np.int64).reshape(n, 1)
    resp_ids = np.full((n, resp_len), pad, dtype=np.int64)
    total = sum(lengths)
    resp_ids[filled] = np.fromiter(itertools.chain.from_iterable(responses), np.int64, total)
    resp_logp = None
    if log_probs is not None:
        resp_logp = np.zeros((n, resp_len), dtype=np.float32)
        resp_logp[filled] = np.fromiter(itertools.chain.from_iterable(log_probs), np.float32, total)
    if finished is None:
        eos = tokenizer.eos_token_id
        finished = [bool(r) and r[-1] == eos for r in responses]
    truncated = [(not f) and len(r) >= max_new_tokens for f, r in zip(finished, responses)]

    input_ids = np.concatenate([prompts.input_ids.cpu().numpy(), resp_ids], axis=1)
    prompt_mask = prompts.attention_mask.cpu().numpy().astype(np.int64)
    attention_mask = np.concatenate([prompt_mask, filled.astype(np.int64)], axis=1)
    position_ids = np.clip(attention_mask.cumsum(axis=1) - 1, 0, None) * attention_mask
    texts = tokenizer.batch_decode(
        [r[:-1] if (f and r and r[-1] == tokenizer.eos_token_id) else r for r, f in zip(responses, finished)],
        skip_special_tokens=True,
    )
    response_mask = filled.astype(np.float32)
    if prompts.multi_modal:  # image placeholders a VL model generated are not the policy's text
        from verl.data.multimodal import image_token_ids

        response_mask[np.isin(resp_ids, sorted(image_token_ids(tokenizer)))] = 0.0
    return prompts.replace(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(attention_mask),
                           position_ids=torch.from_numpy(position_ids), responses=torch.from_numpy(resp_ids),
                           response_mask=torch.from_numpy(response_mask),
                           rollout_log_probs=None if resp_logp is None else torch.from_numpy(resp_logp),
                           response_text=texts, truncated=truncated)
