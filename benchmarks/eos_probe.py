"""The EOS logit bias of e2e_grpo.py --lengths realistic, calibrated once from the model itself (benchmarks/
lengths.py has the arithmetic). The driver runs it before any worker and hands the same bias to every side.

The probe: N_SEQS sequences of random token ids (a seeded torch.Generator on the CPU: the same ids
everywhere), PROBE_PROMPT prompt tokens then max_new_tokens response tokens, one teacher-forced forward of the
model in its saved dtype on the device; log q_t = log_softmax(logits)[EOS] at each response step t. With
random weights the model's distribution is close to uniform, so teacher forcing on uniform ids stands in for
the engine's own samples (checked on the CPU with vLLM: benchmarks/e2e_grpo.py prints the measured median
beside the predicted one). Deterministic for a model folder, device type and sizes; the result is cached in
the model folder (eos_bias_*.json), so a second run reads it.
"""

from __future__ import annotations

import json
import os

import lengths

N_SEQS = 8
PROBE_PROMPT = 32
SEED = 0


def eos_log_probs(model_path: str, device: str, max_new_tokens: int, n_seqs: int = N_SEQS,
                  prompt_len: int = PROBE_PROMPT, seed: int = SEED) -> tuple[int, list[list[float]]]:
    """(EOS id, log q of shape [n_seqs][max_new_tokens]) from one forward per sequence."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(model_path)
    eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, int) else cfg.eos_token_id[0]
    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(dev).eval()
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size - 1, (n_seqs, prompt_len + max_new_tokens), generator=gen)
    ids = ids + (ids >= eos).long()  # uniform over the vocabulary without EOS: [n, P + M]
    out = []
    with torch.no_grad():
        for row in ids:
            # logits at positions P-1 .. P+M-2 predict response tokens 1 .. M: [M, V] -> log q_t [M]
            logits = model(row[None].to(dev)).logits[0, prompt_len - 1: prompt_len - 1 + max_new_tokens]
            out.append(torch.log_softmax(logits.float(), dim=-1)[:, eos].tolist())
    del model
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return eos, out


def calibrate(model_path: str, device: str, max_new_tokens: int) -> dict:
    """{eos_id, eos_bias, predicted median / mean / share at the maximum, the probe's mean log q}; cached."""
    median = lengths.MEDIAN_FRACTION * max_new_tokens
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    cache = os.path.join(model_path, f"eos_bias_{kind}_m{max_new_tokens}_n{N_SEQS}_s{SEED}.json")
    if os.path.exists(cache):
        with open(cache) as fh:
            return json.load(fh)
    eos, log_q = eos_log_probs(model_path, device, max_new_tokens)
    bias = lengths.eos_bias_for_median(log_q, median)
    flat = [x for seq in log_q for x in seq]
    out = dict(eos_id=eos, eos_bias=round(bias, 4), target_median=median,
               predicted=lengths.predicted_lengths(log_q, bias, max_new_tokens),
               probe_log_q_mean=round(sum(flat) / len(flat), 3),
               probe=f"{N_SEQS} x ({PROBE_PROMPT} + {max_new_tokens}) random ids, seed {SEED}, {kind}")
    with open(cache + f".tmp{os.getpid()}", "w") as fh:
        json.dump(out, fh, indent=1)
    os.replace(cache + f".tmp{os.getpid()}", cache)
    return out
