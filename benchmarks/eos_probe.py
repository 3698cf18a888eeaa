"""The EOS logit bias of e2e_grpo.py --lengths realistic, calibrated once from the model itself (benchmarks/
lengths.py has the arithmetic). The driver runs it before any worker and hands the same bias to every side.

The probe: N_SEQS of the run's own prompts (evenly spaced through its list; PROBE_PROMPT random ids where none
are given), each followed by max_new_tokens random response ids (a seeded torch.Generator on the CPU: the same
ids everywhere), one teacher-forced forward of the model (bf16 on a GPU, fp32 on the CPU) per sequence;
log q_t = log_softmax(logits)[EOS] at each response step t. With random weights the model's distribution is
close to uniform, so teacher forcing on uniform ids stands in for the engine's own samples: on the CPU
(tiny-llama, 32 tokens at most) HF's sampled trajectories gave the same mean and spread of log q (-9.09, 0.26)
and vLLM under the calibrated bias a median of 8 (predicted 8), mean 10.6-11.4 (11.5), 5-5.5% at the maximum
(7.8%) over 256 completions. Deterministic for a model folder, device type, sizes and prompts; the result is
cached in the model folder (eos_bias_*.json), so a second run reads it.
"""

from __future__ import annotations

import json
import os
import zlib

import lengths

N_SEQS = 8
PROBE_PROMPT = 32
SEED = 0


def probe_prompts(prompt_ids: list[list[int]], n_seqs: int = N_SEQS) -> list[list[int]]:
    """n_seqs prompts evenly spaced through the run's list (all of them when it is shorter)."""
    step = max(1, len(prompt_ids) // n_seqs)
    return [list(p) for p in prompt_ids[::step][:n_seqs]]


def eos_log_probs(model_path: str, device: str, max_new_tokens: int, prompts: list[list[int]] | None = None,
                  n_seqs: int = N_SEQS, seed: int = SEED) -> tuple[int, list[list[float]]]:
    """(EOS id, log q of shape [len(prompts) or n_seqs][max_new_tokens]) from one forward per sequence."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(model_path)
    eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, int) else cfg.eos_token_id[0]
    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(dev).eval()
    gen = torch.Generator().manual_seed(seed)

    def uniform(k):  # k ids uniform over the vocabulary without EOS
        ids = torch.randint(0, cfg.vocab_size - 1, (k,), generator=gen)
        return ids + (ids >= eos).long()

    prompts = prompts or [uniform(PROBE_PROMPT).tolist() for _ in range(n_seqs)]
    out = []
    with torch.no_grad():
        for prompt in prompts:
            row = torch.cat([torch.tensor(prompt, dtype=torch.long), uniform(max_new_tokens)])  # [P + M]
            # logits at positions P-1 .. P+M-2 predict response tokens 1 .. M: [M, V] -> log q_t [M]
            logits = model(row[None].to(dev)).logits[0, len(prompt) - 1: len(prompt) - 1 + max_new_tokens]
            out.append(torch.log_softmax(logits.float(), dim=-1)[:, eos].tolist())
            del logits
    del model  # the driver holds no GPU memory while the workers run
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return eos, out


def calibrate(model_path: str, device: str, max_new_tokens: int, prompt_ids: list[list[int]] | None = None) -> dict:
    """{eos_id, eos_bias, predicted median / mean / share at the maximum, the probe's mean log q}, from the run's
    prompts (token ids; probe_prompts picks N_SEQS of them); cached."""
    median = lengths.MEDIAN_FRACTION * max_new_tokens
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    prompts = probe_prompts(prompt_ids) if prompt_ids else None
    key = zlib.crc32(json.dumps(prompts).encode())
    cache = os.path.join(model_path, f"eos_bias_{kind}_m{max_new_tokens}_n{N_SEQS}_s{SEED}_p{key:08x}.json")
    if os.path.exists(cache):
        with open(cache) as fh:
            return json.load(fh)
    eos, log_q = eos_log_probs(model_path, device, max_new_tokens, prompts)
    bias = lengths.eos_bias_for_median(log_q, median)
    flat = [x for seq in log_q for x in seq]
    out = dict(eos_id=eos, eos_bias=round(bias, 4), target_median=median,
               predicted=lengths.predicted_lengths(log_q, bias, max_new_tokens),
               probe_log_q_mean=round(sum(flat) / len(flat), 3),
               probe=(f"{len(log_q)} of the run's prompts" if prompts else f"{N_SEQS} x {PROBE_PROMPT} random ids")
               + f" + {max_new_tokens} random response ids, seed {SEED}, {kind}")
    with open(cache + f".tmp{os.getpid()}", "w") as fh:
        json.dump(out, fh, indent=1)
    os.replace(cache + f".tmp{os.getpid()}", cache)
    return out
