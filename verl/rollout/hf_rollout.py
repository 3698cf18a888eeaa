"""Hugging Face `generate` backend: samples with the actor's own module (no weight sync).

The plain, always-available path; `rollout.name: vllm` is the fast one.
"""

from __future__ import annotations

import contextlib

import torch

from verl.batch import Batch
from verl.rollout.base import RolloutEngine, SamplingParams, assemble_rollout


class HFRollout(RolloutEngine):
    def __init__(self, model: torch.nn.Module, tokenizer, rollout_cfg, autocast_dtype=None):
        self.model = model  # the actor's module itself: generation always sees current weights
        self.tokenizer = tokenizer
        self.chunk = rollout_cfg.batch_size  # sequences per generate() call; None = all
        self.autocast_dtype = autocast_dtype

    def _autocast(self, device):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)

    @torch.no_grad()
    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        rows = prompts.repeat(sampling.n)
        device = next(self.model.parameters()).device
        tok = self.tokenizer
        responses, log_probs, finished = [], [], []
        was_training = self.model.training
        self.model.eval()
        try:
            for part in rows.split(self.chunk or len(rows)):
                r, lp, f = self._generate_part(part, sampling, device)
                responses += r
                log_probs += lp
                finished += f
        finally:
            self.model.train(was_training)
        return assemble_rollout(rows, responses, log_probs, tok, sampling.max_new_tokens, finished)

    def _generate_part(self, part: Batch, sampling: SamplingParams, device):
        tok = self.tokenizer
        gen_kwargs = dict(max_new_tokens=sampling.max_new_tokens, eos_token_id=tok.eos_token_id,
                          pad_token_id=tok.pad_token_id, return_dict_in_generate=True, output_logits=True)
        if sampling.greedy or sampling.temperature == 0:
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            temperature = 1.0
        else:
            gen_kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                              top_k=sampling.top_k or None)
            temperature = sampling.temperature
        if sampling.stop:
            gen_kwargs.update(stop_strings=list(sampling.stop), tokenizer=tok)
        input_ids = part.input_ids.to(device)
        attention_mask = part.attention_mask.to(device)
        with self._autocast(device):
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **gen_kwargs)
        prompt_len = input_ids.shape[1]
        seqs_dev = out.sequences[:, prompt_len:]
        # Raw logits / temperature: the distribution the actor recomputes (top-p/top-k
        # truncation is a sampling detail the policy-gradient ratio does not model).
        # One decode step at a time, on the device: never a (b, steps, V) float32 copy.
        logp = torch.stack([
            torch.log_softmax(step_logits.float() / temperature, dim=-1).gather(-1, seqs_dev[:, i:i + 1]).squeeze(-1)
            for i, step_logits in enumerate(out.logits)], dim=1).cpu()  # (b, steps)
        seqs = seqs_dev.cpu()
        responses, log_probs, finished = [], [], []
        for i in range(seqs.shape[0]):
            ids = seqs[i].tolist()
            end = len(ids)
            if tok.eos_token_id in ids:
                end = ids.index(tok.eos_token_id) + 1
            ids = ids[:end]
            done = bool(ids) and ids[-1] == tok.eos_token_id
            if not done and sampling.stop:
                text = tok.decode(ids, skip_special_tokens=True)
                done = any(s in text for s in sampling.stop) and len(ids) < sampling.max_new_tokens
            responses.append(ids)
            log_probs.append(logp[i, :end].tolist())
            finished.append(done)
        return responses, log_probs, finished
