"""Token-list helpers the engines share: prompt rows without padding, the pad id, left-padded contexts,
the response texts decoded in one Rust call, the tokenizer folder the engine loads, free GPU memory."""

from __future__ import annotations

import os

import torch


def unpadded_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """Each row's real (mask 1) token ids as a list: two whole-tensor .tolist() calls instead of
    one indexing op per row (left padding or any other)."""
    mask = attention_mask.cpu().bool()
    lengths = mask.sum(dim=1)
    width = mask.shape[1]
    rows = input_ids.cpu().tolist()
    if torch.equal(mask, torch.arange(width) >= (width - lengths)[:, None]):  # left padding: a suffix each
        return [r[width - n:] for r, n in zip(rows, lengths.tolist())]
    return [[t for t, m in zip(r, k) if m] for r, k in zip(rows, mask.tolist())]


def pad_id(tokenizer) -> int:
    """The id that pads token rows: the tokenizer's pad token, else its EOS (many causal LMs have no pad)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def left_padded(seqs: list, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (len(seqs), longest), of token-id lists left-padded with
    `pad_id`: the prompt layout every engine takes (a context that goes on from earlier tokens)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
        att[i, width - len(s):] = 1
    return ids, att


class RustBatchDecode:
    """The tokenizer as `assemble_rollout` uses it (pad/eos ids, batch_decode), with batch_decode
    done by a fast tokenizer's Rust backend in one call: transformers' batch_decode first walks
    every token id in Python (to_py_obj), then decodes row by row (0.28 s for 512 x 256 tokens on
    this project's 2-core CPU, against 0.09 s). Same text: used only where transformers' own decode is
    exactly the backend's (a plain fast tokenizer, no clean-up of tokenization spaces)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __getattr__(self, name):  # everything else (pad/eos ids, ...) is the tokenizer's own
        return getattr(self.tokenizer, name)

    def batch_decode(self, sequences, skip_special_tokens: bool = False) -> list[str]:
        tok = self.tokenizer
        try:
            from transformers import PreTrainedTokenizerFast

            plain = (isinstance(tok, PreTrainedTokenizerFast) and type(tok)._decode is PreTrainedTokenizerFast._decode
                     and not getattr(tok, "clean_up_tokenization_spaces", False))
        except ImportError:
            plain = False
        if not plain:
            return tok.batch_decode(sequences, skip_special_tokens=skip_special_tokens)
        rows = [s if isinstance(s, list) else list(s) for s in sequences]
        return tok.backend_tokenizer.decode_batch(rows, skip_special_tokens=skip_special_tokens)


def free_gib() -> float:
    return torch.cuda.mem_get_info()[0] / 2**30


def release_cached_blocks() -> None:
    """Hand PyTorch's cached, unused CUDA blocks back to the driver before a sleeping engine maps
    its memory again. The update's activations are freed when it ends but stay reserved by the
    caching allocator, where the engine (vLLM's cuMem pool, SGLang's scheduler process) cannot
    use them: on the H200 on 2026-12-01 an update sized by the token budget to ~96 GiB left the
    KV cache's wake-up out of memory (cumem_allocator.cpp:163)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def tokenizer_path(tokenizer, model_path: str) -> str:
    """The engine (vLLM, SGLang) loads its own tokenizer (stop strings): the model folder's, else the actor's folder."""
    if any(os.path.exists(os.path.join(model_path, f)) for f in ("tokenizer.json", "tokenizer_config.json")):
        return model_path
    name = getattr(tokenizer, "name_or_path", "") or ""
    return name if name and os.path.isdir(name) else model_path
