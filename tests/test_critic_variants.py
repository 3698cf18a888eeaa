"""Critic variants: another size with the same tokenizer, and a different tokenizer (BERT-style)."""

import math

import pytest
import torch

from conftest import small_overrides
from verl import create_trainer, load_config
from verl.workers.text_critic import TextCritic, map_values_to_actor_tokens, response_char_ends


def test_offset_mapping_hand_example():
    # prompt "Hi. " (4 chars) + response "unbelievable day" split by the actor as
    # ["un", "believ", "able", " day"] -> response char ends [2, 8, 12, 16].
    # Critic tokens over "Hi. unbelievable day": [CLS](0,0) "hi"(0,2) "."(2,3) "unbeliev"(4,12)
    # "##able"(12,16)... here the critic splits the word differently: "unbeliev" + "##able" + "day".
    critic = [(0, 0), (0, 2), (2, 3), (4, 12), (12, 16), (17, 20), (0, 0)]
    idx = map_values_to_actor_tokens(critic, prompt_chars=4, token_ends=[2, 8, 12, 16], length=6)
    # actor token t starts at prompt_chars + ends[t-1]: 4, 6, 12, 16.
    # token 0 (char 4): last critic token ending <= 4 is "." (index 2)
    # token 1 (char 6): still "." -- "unbeliev" ends at 12
    # token 2 (char 12): "unbeliev" (4,12) ends at 12 -> index 3
    # token 3 (char 16): "##able" (12,16) ends at 16 -> index 4
    # positions 4, 5 are padding: repeat the last index
    assert idx == [2, 2, 3, 4, 4, 4]


def test_offset_mapping_falls_back_to_first_token():
    # No critic token ends before the response starts (empty prompt): use index 0 ([CLS]).
    assert map_values_to_actor_tokens([(0, 0), (0, 3)], prompt_chars=0, token_ends=[3], length=1) == [0]


def test_response_char_ends_with_real_tokenizers(tiny_gpt2, tiny_qwen2):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_gpt2)
    ids = tok("I love reinforcement learning")["input_ids"]
    text, ends = response_char_ends(tok, ids)
    assert text == "I love reinforcement learning"
    assert ends[-1] == len(text) and ends == sorted(ends)
    # each token's text is the slice between consecutive ends
    pieces = [text[(ends[i - 1] if i else 0):ends[i]] for i in range(len(ends))]
    assert "".join(pieces) == text and pieces[0] == "I"


def test_words_split_differently_by_the_two_tokenizers(tiny_gpt2):
    from transformers import AutoTokenizer

    from verl.models.tiny import tiny_model_path

    actor = AutoTokenizer.from_pretrained(tiny_gpt2)
    critic = AutoTokenizer.from_pretrained(tiny_model_path("bert"))
    text = "Tom buys unbelievable apples"
    assert actor.tokenize(text) != critic.tokenize(text)
    ids = actor(text)["input_ids"]
    _, ends = response_char_ends(actor, ids)
    enc = critic(text, return_offsets_mapping=True)
    idx = map_values_to_actor_tokens(enc["offset_mapping"], 0, ends, len(ids))
    # every mapped critic token ends at or before the start of its actor token
    starts = [0] + ends[:-1]
    for t, j in enumerate(idx):
        assert enc["offset_mapping"][j][1] <= starts[t]


@pytest.mark.parametrize("variant", ["bert", "smaller_same_tokenizer"])
def test_ppo_steps_with_critic_variant(tmp_path, tiny_qwen2, variant):
    from verl.models.tiny import build_tiny_model, tiny_model_path

    if variant == "bert":
        critic_name = tiny_model_path("bert")
    else:
        # a narrower, shallower qwen2 with the same tokenizer as the actor
        critic_name = build_tiny_model("qwen2", str(tmp_path / "small_critic"), hidden=32, layers=1,
                                       pretrain_steps=0)
    cfg = load_config(None, small_overrides(tmp_path, **{"model.name": "tiny:qwen2", "critic.name": critic_name}))
    trainer = create_trainer(cfg)
    assert isinstance(trainer.critic, TextCritic) == (variant == "bert")
    before = {n: p.detach().clone() for n, p in trainer.critic.model.named_parameters()}
    for _ in range(2):
        m = trainer.step()
        assert math.isfinite(m["vf_loss"]) and math.isfinite(m["critic/explained_var"])
    changed = [n for n, p in trainer.critic.model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert "value_head.weight" in changed and len(changed) > len(before) // 2
