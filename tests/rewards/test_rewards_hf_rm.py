"""`huggingface_rm` with tiny locally built reward models, and Bradley-Terry RM training."""

import json
import random

import pytest
import torch
from transformers import AutoTokenizer, GPT2Config, GPT2ForSequenceClassification

from verl.batch import Batch
from verl.config import RewardFnConfig
from verl.models.tiny import tiny_model_path
from verl.rewards import build_reward_manager
from verl.rewards.train_rm import load_pairs, main, train_reward_model


def build_rm(out_dir, tokenizer_arch="gpt2", seed=0):
    """A random 1-layer GPT2ForSequenceClassification(num_labels=1) with the tiny `arch` tokenizer."""
    tok = AutoTokenizer.from_pretrained(tiny_model_path(tokenizer_arch))
    config = GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=32, n_layer=1, n_head=2, num_labels=1,
                        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                        bos_token_id=tok.bos_token_id)
    torch.manual_seed(seed)
    GPT2ForSequenceClassification(config).save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return str(out_dir)


@pytest.fixture(scope="module")
def rm_gpt2(tmp_path_factory):
    return build_rm(tmp_path_factory.mktemp("rm_gpt2"), "gpt2")


@pytest.fixture(scope="module")
def rm_chat(tmp_path_factory):
    return build_rm(tmp_path_factory.mktemp("rm_chat"), "qwen2")  # tokenizer with a chat template


def direct_scores(path, texts, max_length=512):
    tok = AutoTokenizer.from_pretrained(path)
    model = GPT2ForSequenceClassification.from_pretrained(path).eval()
    out = []
    with torch.no_grad():
        for text in texts:
            ids = tok(text, add_special_tokens=False)["input_ids"][-max_length:]
            out.append(model(input_ids=torch.tensor([ids])).logits[0, 0].item())
    return out


def actor_batch(prompts, responses, **kw):
    """A batch as the rollout makes it: token ids from the ACTOR's tokenizer (qwen2 here)."""
    actor_tok = AutoTokenizer.from_pretrained(tiny_model_path("qwen2"))
    ids = [actor_tok(r, add_special_tokens=False)["input_ids"] for r in responses]
    width = max(len(i) for i in ids)
    resp = torch.tensor([i + [actor_tok.pad_token_id] * (width - len(i)) for i in ids])
    mask = torch.tensor([[1.0] * len(i) + [0.0] * (width - len(i)) for i in ids])
    return Batch(prompt_text=prompts, response_text=responses, responses=resp, response_mask=mask, **kw)


PROMPTS = ["What is the capital of France?", "Tell me a story."]
RESPONSES = [" Paris is the capital of France.", " Once upon a time there was a little robot who loved to learn."]


def test_rm_scores_batch_with_its_own_tokenizer(rm_gpt2):
    # The RM's gpt2 tokenizer has no chat template: it sees the plain text prompt + response,
    # re-tokenized with its own vocabulary (the actor's qwen2 ids in batch.responses are not used).
    cfg = RewardFnConfig(type="huggingface_rm", model_name=rm_gpt2, rm_batch_size=1)
    scores, metrics = build_reward_manager(cfg).score(actor_batch(PROMPTS, RESPONSES))
    expected = direct_scores(rm_gpt2, [p + r for p, r in zip(PROMPTS, RESPONSES)])
    assert scores.tolist() == pytest.approx(expected, abs=1e-5)
    assert metrics["reward/huggingface_rm"] == pytest.approx(sum(expected) / 2, abs=1e-5)
    # padding inside one RM batch does not change the scores
    scores2, _ = build_reward_manager(RewardFnConfig(type="huggingface_rm", model_name=rm_gpt2,
                                                     rm_batch_size=8)).score(actor_batch(PROMPTS, RESPONSES))
    assert scores2.tolist() == pytest.approx(expected, abs=1e-5)


def test_rm_chat_template_and_raw_prompt(rm_chat):
    manager = build_reward_manager(RewardFnConfig(type="huggingface_rm", model_name=rm_chat))
    rm = manager.components[0].fn
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPTS[0]}]
    batch = actor_batch(["<|im_start|>user\nWhat is the capital of France?<|im_end|>\n", PROMPTS[1]], RESPONSES,
                        extra=[{"raw_prompt": messages}, {}])
    scores, _ = manager.score(batch)
    texts, templated = rm.texts(batch.prompt_text, batch.response_text,
                                [{"extra": e} for e in batch.extra])
    assert templated
    assert texts[0] == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is the capital of "
                        "France?<|im_end|>\n<|im_start|>assistant\n Paris is the capital of France.<|im_end|>\n")
    assert texts[1].startswith("<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n Once")
    assert scores.tolist() == pytest.approx(direct_scores(rm_chat, texts), abs=1e-5)


def test_rm_truncation_keeps_the_end(rm_gpt2):
    long_response = " one two three" * 40
    cfg = RewardFnConfig(type="huggingface_rm", model_name=rm_gpt2, max_length=16)
    scores, _ = build_reward_manager(cfg).score(actor_batch(["Hello"], [long_response]))
    assert scores.tolist() == pytest.approx(direct_scores(rm_gpt2, ["Hello" + long_response], max_length=16),
                                            abs=1e-5)


def test_rm_normalize_and_clip(rm_gpt2):
    responses = [" one", " one two three four", " Paris", " the lazy dog", " 42", " hundred"]
    batch = actor_batch(["Q"] * len(responses), responses)
    raw, _ = build_reward_manager(RewardFnConfig(type="huggingface_rm", model_name=rm_gpt2)).score(batch)
    manager = build_reward_manager(RewardFnConfig(type="huggingface_rm", model_name=rm_gpt2, normalize=True))
    norm, _ = manager.score(batch)
    assert norm.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert norm.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)
    assert torch.argsort(norm).tolist() == torch.argsort(raw).tolist()
    stats = manager.components[0].fn.stats
    manager.score(batch)  # running statistics keep accumulating
    assert stats.count == 2 * len(responses)
    clipped, _ = build_reward_manager(RewardFnConfig(type="huggingface_rm", model_name=rm_gpt2, normalize=True,
                                                     clip=0.5)).score(batch)
    assert clipped.abs().max().item() <= 0.5 + 1e-6
    assert clipped.tolist() == pytest.approx(norm.clamp(-0.5, 0.5).tolist(), abs=1e-5)


def test_rm_loaded_lazily_once(rm_gpt2):
    manager = build_reward_manager(RewardFnConfig(type="huggingface_rm", model_name=rm_gpt2))
    rm = manager.components[0].fn
    assert rm.model is None
    manager.score(actor_batch(PROMPTS, RESPONSES))
    model = rm.model
    assert not model.training
    manager.score(actor_batch(PROMPTS, RESPONSES))
    assert rm.model is model


# ----------------------------------------------------------------------------- training
WORDS = "the model writes an answer a reward function scores it and the policy improves one two three".split()


def synthetic_pairs(n, seed):
    """Chosen responses contain 'love'; rejected ones are the same words without it."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(6)]
        chosen = list(words)
        chosen.insert(rng.randint(0, 6), "love")
        pairs.append({"prompt": "Tell me a story.", "chosen": " " + " ".join(chosen), "rejected": " " + " ".join(words)})
    return pairs


def test_train_reward_model_raises_heldout_accuracy(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(min(threads, 2))  # the budget: < 60 s on 2 CPU cores
    try:
        _train_and_check(tmp_path)
    finally:
        torch.set_num_threads(threads)


def _train_and_check(tmp_path):
    train, val = synthetic_pairs(64, seed=1), synthetic_pairs(32, seed=2)
    out = tmp_path / "rm"
    metrics = train_reward_model("tiny:gpt2", train, val, str(out), epochs=3, lr=1e-3, batch_size=16,
                                 max_length=64, seed=0)
    assert metrics["val_accuracy_after"] >= 0.85
    assert metrics["val_accuracy_after"] > metrics["val_accuracy_before"] + 0.2
    assert metrics["steps"] == 12
    # the saved folder works as a huggingface_rm reward
    manager = build_reward_manager(RewardFnConfig(type="huggingface_rm", model_name=str(out)))
    scores, _ = manager.score(Batch(prompt_text=["Tell me a story."] * 2, response_text=[v for p in val[:1] for v in
                                                                                    (p["chosen"], p["rejected"])]))
    assert scores[0] > scores[1]


def test_load_pairs_and_cli(tmp_path, capsys):
    train_file = tmp_path / "train.jsonl"
    train_file.write_text("\n".join(json.dumps(p) for p in synthetic_pairs(8, seed=3)) + "\n")
    assert len(load_pairs(str(train_file))) == 8
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "chosen": "c"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: missing .*rejected"):
        load_pairs(str(bad))
    assert main(["--model", "tiny:gpt2", "--train", str(bad), "--out", str(tmp_path / "x")]) == 2
    out_dir = tmp_path / "cli_rm"
    rc = main(["--model", "tiny:gpt2", "--train", str(train_file), "--val", str(train_file), "--out", str(out_dir),
               "--epochs", "1", "--lr", "1e-3", "--batch-size", "4", "--max-length", "32"])
    assert rc == 0
    assert (out_dir / "train_rm_metrics.json").exists() and (out_dir / "config.json").exists()
    assert "val_accuracy_after" in capsys.readouterr().out
