"""PromptLoader: rendering, truncation, left padding, seeded order, epochs and exact resume."""

import json

import pytest
import torch

from verl.config import Config, DataConfig
from verl.data.prompts import (DEFAULT_PROMPTS, PromptLoader, PromptRow, build_prompt_loaders, load_prompt_rows,
                               render_prompt)
from verl.data.sources import DataError
from verl.models.tiny import tiny_model_path


@pytest.fixture(scope="module")
def gpt2_tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path("gpt2"))


@pytest.fixture(scope="module")
def qwen_tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path("qwen2"))


def rows_of(texts, source="t"):
    return [PromptRow(prompt=t, ground_truth=str(i), data_source=source, extra={"i": i}, origin=f"f.jsonl line {i + 1}")
            for i, t in enumerate(texts)]


def default_rows():
    return load_prompt_rows(DataConfig())


# ------------------------------------------------------------------ rendering
def test_chat_template_for_qwen2_not_for_gpt2(gpt2_tok, qwen_tok):
    cfg = DataConfig()
    assert render_prompt("I love", gpt2_tok, cfg) == "I love"
    text = render_prompt("I love", qwen_tok, cfg)
    assert text == "<|im_start|>user\nI love<|im_end|>\n<|im_start|>assistant\n"
    assert render_prompt("I love", qwen_tok, DataConfig(apply_chat_template=False)) == "I love"


def test_chat_template_kwargs_reach_the_template(qwen_tok):
    # a Qwen3-style switch: the template opens an empty think block when enable_thinking is false
    import copy

    from verl.rollout.turn_template import TurnTemplate

    tok = copy.copy(qwen_tok)
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n"
                         "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
                         "{% endif %}")
    off = DataConfig(chat_template_kwargs={"enable_thinking": False})
    assert render_prompt("2+2?", tok, off).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert render_prompt("2+2?", tok, DataConfig()).endswith("<|im_start|>assistant\n")
    # the multi-turn template renders later turns with the same arguments
    turns = TurnTemplate(tok, chat=True, template_kwargs={"enable_thinking": False})
    assert turns._render([{"role": "user", "content": "x"}], generation_prompt=True).endswith("</think>\n\n")


def test_system_prompt(gpt2_tok, qwen_tok):
    cfg = DataConfig(system_prompt="Be brief.")
    assert render_prompt("Hi", qwen_tok, cfg).startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi")
    assert render_prompt("Hi", gpt2_tok, cfg) == "Be brief.\nHi"
    # A conversation that brings its own system message keeps it.
    msgs = [{"role": "system", "content": "Own."}, {"role": "user", "content": "Hi"}]
    assert "Be brief." not in render_prompt(msgs, qwen_tok, cfg)
    assert render_prompt(msgs, gpt2_tok, DataConfig()) == "Own.\nHi"


def test_batch_text_and_tokens_for_chat_model(qwen_tok):
    loader = PromptLoader(rows_of(["What is 2+3?"]), qwen_tok, DataConfig(), batch_size=1, seed=0)
    batch = loader.next_batch()
    assert batch.prompt_text == ["<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"]
    # The template's special tokens are single ids, and nothing is added twice.
    assert batch.input_ids[0].tolist() == qwen_tok(batch.prompt_text[0], add_special_tokens=False)["input_ids"]
    assert batch.input_ids[0, 0].item() == qwen_tok.convert_tokens_to_ids("<|im_start|>")


# ------------------------------------------------------------------ layout
def test_left_padding_layout(gpt2_tok):
    texts = ["Hi", "I love reinforcement learning very much", "Tell me about"]
    loader = PromptLoader(rows_of(texts), gpt2_tok, DataConfig(shuffle=False), batch_size=3, seed=0)
    b = loader.next_batch()
    lengths = [len(gpt2_tok(t)["input_ids"]) for t in texts]
    assert b.input_ids.shape == b.attention_mask.shape == (3, max(lengths))
    assert b.input_ids.dtype == torch.long and b.attention_mask.dtype == torch.long
    for i, (t, n) in enumerate(zip(texts, lengths)):
        pad = b.input_ids.shape[1] - n
        assert b.attention_mask[i].tolist() == [0] * pad + [1] * n
        assert b.input_ids[i, :pad].tolist() == [gpt2_tok.pad_token_id] * pad
        assert b.input_ids[i, pad:].tolist() == gpt2_tok(t)["input_ids"]
    assert b.attention_mask[:, -1].tolist() == [1, 1, 1]  # left padding: last column is real
    assert b.prompt_text == texts
    assert b.ground_truth == ["0", "1", "2"] and b.data_source == ["t"] * 3
    assert b.extra == [{"i": 0}, {"i": 1}, {"i": 2}] and b.group_id == [0, 1, 2]
    assert len(b) == 3


def test_pad_falls_back_to_eos(gpt2_tok):
    import copy

    tok = copy.deepcopy(gpt2_tok)
    tok.pad_token = None
    loader = PromptLoader(rows_of(["Hi", "I love it"]), tok, DataConfig(), batch_size=2, seed=0)
    assert loader.pad_token_id == tok.eos_token_id


# ------------------------------------------------------------------ truncation
def _long_and_short(tok):
    texts = ["Hi", "I love", "I love reinforcement learning. " * 4, "Tell me a story about the sea " * 3]
    lengths = [len(tok(t)["input_ids"]) for t in texts]
    return texts, lengths


def test_filter_drops_long_prompts_and_reports_once(gpt2_tok, capsys):
    texts, lengths = _long_and_short(gpt2_tok)
    limit = 8
    expected = sum(n > limit for n in lengths)
    assert 0 < expected < len(texts)
    loader = PromptLoader(rows_of(texts), gpt2_tok, DataConfig(max_prompt_length=limit), batch_size=4, seed=0)
    assert loader.num_filtered == expected and len(loader) == len(texts) - expected
    for _ in range(3):
        assert loader.next_batch().input_ids.shape[1] <= limit
    out = capsys.readouterr().out
    assert out.count("dropped") == 1 and f"dropped {expected} of {len(texts)} prompts" in out


@pytest.mark.parametrize("mode", ["left", "right"])
def test_truncation_keeps_the_right_end(gpt2_tok, capsys, mode):
    texts, lengths = _long_and_short(gpt2_tok)
    limit = 8
    loader = PromptLoader(rows_of(texts), gpt2_tok, DataConfig(max_prompt_length=limit, truncation=mode,
                                                               shuffle=False), batch_size=4, seed=0)
    assert loader.num_truncated == sum(n > limit for n in lengths) and len(loader) == len(texts)
    b = loader.next_batch()
    assert b.input_ids.shape[1] == limit
    full = gpt2_tok(texts[2])["input_ids"]
    assert b.input_ids[2].tolist() == (full[-limit:] if mode == "left" else full[:limit])
    assert f"cut {loader.num_truncated} of 4 prompts" in capsys.readouterr().out


def test_truncation_error_names_file_and_line(gpt2_tok):
    texts, _ = _long_and_short(gpt2_tok)
    with pytest.raises(DataError, match=r"f\.jsonl line 3: the prompt has \d+ tokens, more than "
                                        r"data\.max_prompt_length=8"):
        PromptLoader(rows_of(texts), gpt2_tok, DataConfig(max_prompt_length=8, truncation="error"), 2, 0)


def test_everything_filtered_is_an_error(gpt2_tok):
    with pytest.raises(DataError, match="all 2 prompts are longer"):
        PromptLoader(rows_of(["I love it a lot", "Tell me about it"]), gpt2_tok,
                     DataConfig(max_prompt_length=1), 2, 0)
    with pytest.raises(DataError, match="no prompt rows"):
        PromptLoader([], gpt2_tok, DataConfig(), 2, 0)


# ------------------------------------------------------------------ order, epochs, resume
def _take(loader, k):
    return [loader.next_batch() for _ in range(k)]


def _same(a, b):
    return torch.equal(a.input_ids, b.input_ids) and a.prompt_text == b.prompt_text and a.group_id == b.group_id


def test_seeded_order_is_deterministic(gpt2_tok):
    cfg = DataConfig()
    a = _take(PromptLoader(default_rows(), gpt2_tok, cfg, 5, seed=3), 6)
    b = _take(PromptLoader(default_rows(), gpt2_tok, cfg, 5, seed=3), 6)
    c = _take(PromptLoader(default_rows(), gpt2_tok, cfg, 5, seed=4), 6)
    assert all(_same(x, y) for x, y in zip(a, b))
    assert [x.prompt_text for x in a] != [x.prompt_text for x in c]
    plain = _take(PromptLoader(default_rows(), gpt2_tok, DataConfig(shuffle=False), 4, seed=3), 4)
    assert [t for x in plain for t in x.prompt_text] == list(DEFAULT_PROMPTS)


def test_epochs_cover_every_row_once_and_batches_cross_epochs(gpt2_tok):
    loader = PromptLoader(default_rows(), gpt2_tok, DataConfig(), batch_size=5, seed=0)
    assert len(loader) == 16
    texts = [t for b in _take(loader, 7) for t in b.prompt_text]  # 35 samples: epochs 0, 1 and 3 of epoch 2
    assert (loader.epoch, loader.position) == (2, 3)
    assert sorted(texts[:16]) == sorted(DEFAULT_PROMPTS) and sorted(texts[16:32]) == sorted(DEFAULT_PROMPTS)
    assert texts[:16] != texts[16:32]  # a new permutation each epoch
    loader2 = PromptLoader(default_rows(), gpt2_tok, DataConfig(), batch_size=5, seed=0)
    assert [t for b in _take(loader2, 7) for t in b.group_id] == list(range(35))


def test_exact_resume_from_state_dict(gpt2_tok):
    rows = default_rows()
    run = PromptLoader(rows, gpt2_tok, DataConfig(), batch_size=6, seed=11)
    _take(run, 4)  # into the second epoch
    state = json.loads(json.dumps(run.state_dict()))  # survives a JSON checkpoint
    expected = _take(run, 5)
    resumed = PromptLoader(rows, gpt2_tok, DataConfig(), batch_size=6, seed=11)
    resumed.load_state_dict(state)
    assert (resumed.epoch, resumed.position) == (state["epoch"], state["position"])
    assert all(_same(x, y) for x, y in zip(expected, _take(resumed, 5)))


def test_resume_refuses_different_data(gpt2_tok):
    run = PromptLoader(default_rows(), gpt2_tok, DataConfig(), 4, seed=1)
    state = run.state_dict()
    with pytest.raises(DataError, match="16 prompt rows, the data now has 3"):
        PromptLoader(rows_of(["a", "b", "c"]), gpt2_tok, DataConfig(), 4, seed=1).load_state_dict(state)
    with pytest.raises(DataError, match="seed=1"):
        PromptLoader(default_rows(), gpt2_tok, DataConfig(), 4, seed=2).load_state_dict(state)


def test_one_pass_is_in_order_and_leaves_state(gpt2_tok):
    loader = PromptLoader(default_rows(), gpt2_tok, DataConfig(), 8, seed=0)
    batches = list(loader.one_pass(batch_size=5))
    assert [len(b) for b in batches] == [5, 5, 5, 1]
    assert [t for b in batches for t in b.prompt_text] == list(DEFAULT_PROMPTS)
    assert (loader.epoch, loader.position, loader.next_group_id) == (0, 0, 0)


# ------------------------------------------------------------------ from a full config
def test_build_prompt_loaders_defaults(gpt2_tok):
    cfg = Config()
    cfg.training.batch_size = 4
    train, val = build_prompt_loaders(cfg, gpt2_tok)
    assert val is None and len(train) == len(DEFAULT_PROMPTS) and train.seed == cfg.seed
    assert len(train.next_batch()) == 4


def test_build_prompt_loaders_with_files(tmp_path, qwen_tok):
    train_file, val_file = tmp_path / "train.jsonl", tmp_path / "train.val.jsonl"
    train_file.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                                  for i in range(10)))
    val_file.write_text("".join(json.dumps({"prompt": f"What is {i} + 2?", "answer": str(i + 2)}) + "\n"
                                for i in range(5)))
    cfg = Config()
    cfg.data.train_files = [str(train_file)]
    cfg.data.val_files = [str(val_file)]
    cfg.data.val_max_samples = 3
    cfg.training.batch_size = 3
    train, val = build_prompt_loaders(cfg, qwen_tok)
    assert len(train) == 10 and [r.ground_truth for r in val] == ["2", "3", "4"]
    b = train.next_batch()
    assert all(t.startswith("<|im_start|>user\nWhat is") for t in b.prompt_text)
    assert all(int(gt) == int(t.split("What is ")[1].split(" +")[0]) + 1 for gt, t in zip(b.ground_truth, b.prompt_text))
    assert b.data_source == ["train"] * 3
