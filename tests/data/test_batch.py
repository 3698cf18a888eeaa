"""Batch: every field travels through select/split/concat/repeat/to alike."""

import pytest
import torch

from verl.batch import Batch


def make(b=4, p=3, r=2, offset=0):
    ids = torch.arange(b * (p + r)).view(b, p + r) + offset
    return Batch(input_ids=ids, attention_mask=torch.ones_like(ids), responses=ids[:, p:],
                 response_mask=torch.ones(b, r), scores=torch.arange(b).float() + offset,
                 prompt_text=[f"p{i + offset}" for i in range(b)], group_id=list(range(offset, offset + b)))


def test_len_and_shapes():
    b = make()
    assert len(b) == 4 and b.prompt_length == 3 and b.response_length == 2


def test_select_split_concat_roundtrip():
    b = make()
    parts = b.split(3)
    assert [len(x) for x in parts] == [3, 1]
    back = Batch.concat(parts)
    assert torch.equal(back.input_ids, b.input_ids) and back.prompt_text == b.prompt_text
    sel = b.select([2, 0])
    assert sel.prompt_text == ["p2", "p0"] and torch.equal(sel.scores, torch.tensor([2.0, 0.0]))
    mask_sel = b.select(torch.tensor([True, False, False, True]))
    assert mask_sel.group_id == [0, 3]


def test_repeat_keeps_samples_of_a_prompt_adjacent():
    b = make(b=2).repeat(3)
    assert len(b) == 6 and b.group_id == [0, 0, 0, 1, 1, 1]
    assert torch.equal(b.input_ids[0], b.input_ids[2])


def test_chunk_balances():
    assert [len(c) for c in make(b=5).chunk(2)] == [2, 3] or [len(c) for c in make(b=5).chunk(2)] == [3, 2]


def test_concat_pads_to_common_lengths():
    a, c = make(b=1, p=3, r=2), make(b=1, p=2, r=4, offset=100)
    out = Batch.concat([a, c])
    assert out.input_ids.shape == (2, 3 + 4)
    # The shorter prompt is left-padded, the shorter response right-padded, masks zero there.
    assert out.attention_mask[1, 0] == 0 and out.attention_mask[0, -1] == 0
    assert out.response_mask.shape == (2, 4) and out.response_mask[0, 2:].sum() == 0


def test_mismatched_sizes_rejected():
    with pytest.raises(ValueError, match="disagree"):
        Batch(input_ids=torch.zeros(2, 3, dtype=torch.long), prompt_text=["a"])


def test_concat_rejects_partially_missing_field():
    a, c = make(b=1), make(b=1)
    c.scores = None
    with pytest.raises(ValueError, match="scores"):
        Batch.concat([a, c])


def test_to_device_keeps_lists():
    b = make().to("cpu")
    assert b.prompt_text[0] == "p0" and b.input_ids.device.type == "cpu"
