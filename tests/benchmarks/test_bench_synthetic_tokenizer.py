"""benchmarks/synthetic_tokenizer.py: what the random models of the benchmarks decode with (its docstring says
why it stops at 65,795 tokens)."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from synthetic_tokenizer import synthetic_tokenizer  # noqa: E402

CAP = 3 + 256 + 256 * 256  # specials + bytes + byte pairs


@pytest.mark.parametrize("vocab", [1000, 49152, 151936])
def test_size_and_layout(vocab):
    tok = synthetic_tokenizer(vocab)
    assert len(tok) == min(vocab, CAP) and len(set(tok.get_vocab().values())) == len(tok)
    assert tok.convert_ids_to_tokens([0, 1, 2]) == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert [len(tok.convert_ids_to_tokens(i)) for i in (3, 258, 259, len(tok) - 1)] == [1, 1, 2, 2]


def test_ids_past_the_tokenizer_decode_to_nothing_without_error():
    # a Qwen-sized random model samples them: 1 - 65,795 / 151,936 = 57% of uniform ids
    tok = synthetic_tokenizer(151936)
    assert round(1 - CAP / 151936, 2) == 0.57
    assert tok.decode([CAP, 100000, 151935]) == ""
    assert tok.decode([3, CAP, 4]) == tok.decode([3, 4])


def test_logprob_detokenize_benchmark_rows(tmp_path):
    """benchmarks/logprob_detokenize.py on a few tokens: vLLM's own LogprobsProcessor with and without a tokenizer."""
    pytest.importorskip("vllm")
    import json

    import logprob_detokenize

    assert logprob_detokenize.main(["--tokens", "50", "--vocab", "70000", "--out", str(tmp_path)]) == 0
    rows = json.load(open(tmp_path / "logprob_detokenize.json"))["rows"]
    by = {r["tokenizer"]: r for r in rows}
    assert by["synthetic (the benchmarks')"]["tokenizer_size"] == CAP  # capped: ids past it decode to ""
    assert by["synthetic filled with byte triples"]["tokenizer_size"] == 70000
    for r in rows:  # figures only (which is larger is the benchmark's finding, not a test's)
        assert r["detok_us"] > 0 and r["no_detok_us"] > 0
        assert abs(r["added_us"] - (r["detok_us"] - r["no_detok_us"])) <= 0.11  # each figure rounded apart
    full = synthetic_tokenizer(70000, triples=True)
    assert len(full) == 70000
    assert len(full.convert_ids_to_tokens(69999)) == 3 and len(full.convert_ids_to_tokens(CAP - 1)) == 2
