"""The benchmarks' offline tokenizer for random models of real architectures (no model hub here).

    from synthetic_tokenizer import synthetic_tokenizer   # benchmarks/ on sys.path, as the scripts have it
"""

from __future__ import annotations


def synthetic_tokenizer(vocab_size: int, triples: bool = False):
    """A byte-level BPE tokenizer built offline in a second: 3 special tokens, the 256 byte symbols, then
    merges of byte pairs, up to `vocab_size` tokens and at most 65,795. A Qwen-sized random model (151,936
    ids) therefore samples 57% of its ids past the tokenizer: they decode to "" on every side alike
    (HF, vLLM, TRL), and the other 43% are one or two bytes. Kept so, so that the H200 runs of 2026-12-02 to 12-04 stay
    comparable with later ones; text decoding costs about what a real tokenizer's does: vLLM's log-prob token
    decoding (detokenize=True) added 7.4 us a token with this, 5.2 with SmolLM2's real tokenizer and 12.3 with
    pair+byte triples filling all 151,936 ids (`triples=True`), on the 2-core CPU, 2026-12-04
    (benchmarks/logprob_detokenize.py)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {s: i for i, s in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    merges = []
    for a in alphabet:
        for b in alphabet:
            if len(vocab) >= vocab_size:
                break
            vocab[a + b] = len(vocab)
            merges.append((a, b))
    for pair in [a + b for a in alphabet for b in alphabet] if triples else []:
        for c in alphabet:  # (pair, byte): the pair merged first
            if len(vocab) >= vocab_size:
                break
            vocab[pair + c] = len(vocab)
            merges.append((pair, c))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.model_max_length = 1 << 20
    return fast
