"""Images in prompts on the data side: loading every layout, the <image> marker rules, the processor's
expanded ids against the engine's, collate shapes, and Batch carrying multi_modal (tiny random VL models,
no hub)."""

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image

from verl.batch import Batch
from verl.config import DataConfig
from verl.data.multimodal import (MultiModalInputs, collate, encode_with_images, image_token_ids, load_image,
                                  load_images, split_image_markers)
from verl.data.prompts import PromptLoader, load_prompt_rows
from verl.data.sources import DataError, read_rows
from verl.models.loading import load_tokenizer


def _image(h=56, w=56, seed=0, mode="RGB"):
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4}[mode]
    return Image.fromarray((rng.random((h, w, channels)) * 255).astype("uint8"), mode)


def _png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def qwen_tok():
    return load_tokenizer("tiny:qwen2_5_vl")


@pytest.fixture(scope="module")
def llava_tok():
    return load_tokenizer("tiny:llava")


# ------------------------------------------------------------------ loading images


def test_load_image_every_layout(tmp_path):
    img = _image(seed=1)
    (tmp_path / "imgs").mkdir()
    img.save(tmp_path / "imgs" / "a.png")
    want = np.asarray(img)
    for value in (img, {"bytes": _png(img), "path": None},
                  {"bytes": None, "path": "imgs/a.png"}, _png(img), "imgs/a.png", str(tmp_path / "imgs" / "a.png")):
        out = load_image(value, "train.parquet row 3", base_dir=str(tmp_path))
        assert out.mode == "RGB" and out.size == (56, 56)
        assert np.array_equal(np.asarray(out), want)  # PNG is lossless: the same pixels from every layout
    assert load_image(_image(mode="RGBA"), "x").mode == "RGB"
    assert load_images(None, "x") == () and len(load_images([img, img], "x")) == 2 and len(load_images(img, "x")) == 1


@pytest.mark.parametrize("value,words", [
    ({"bytes": None, "path": None}, "neither 'bytes' nor 'path'"),
    (b"not a png", "bytes that are not an image"),
    ("missing.png", "does not exist"),
    (42, "expected an image"),
])
def test_bad_image_names_file_row_and_key(tmp_path, value, words):
    with pytest.raises(DataError) as err:
        load_images([value], "train.parquet row 7", str(tmp_path), "images")
    message = str(err.value)
    assert message.startswith("train.parquet row 7: images[0]:") and words in message and "\n" not in message


def test_hf_datasets_image_feature_reaches_the_batch(qwen_tok):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({
        "prompt": [[{"role": "user", "content": "<image>What is it?"}], [{"role": "user", "content": "Hi"}]],
        "images": [[_image(seed=2)], []],
    }).cast_column("images", datasets.Sequence(datasets.Image()))
    rows = read_rows(ds)
    assert isinstance(rows[0].images[0], Image.Image) and rows[1].images is None
    loader = PromptLoader(rows, qwen_tok, DataConfig(shuffle=False), batch_size=2)
    batch = loader.next_batch()
    assert batch.multi_modal[0] is not None and batch.multi_modal[1] is None
    assert batch.multi_modal[0].model_inputs["image_grid_thw"].tolist() == [[1, 4, 4]]


def test_real_verl_parquet_layout(tmp_path, qwen_tok):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = [{"data_source": "hiyouga/geometry3k", "prompt": [{"role": "user", "content": f"<image>Angle {i}?"}],
             "images": [{"bytes": _png(_image(seed=i)), "path": None}],
             "reward_model": {"style": "rule", "ground_truth": str(i)}} for i in range(3)]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    cfg = DataConfig(train_files=[str(path)], shuffle=False)
    loader = PromptLoader(load_prompt_rows(cfg), qwen_tok, cfg, batch_size=3)
    batch = loader.next_batch()
    pad = qwen_tok.convert_tokens_to_ids("<|image_pad|>")
    # 56x56 -> a (1, 4, 4) grid of 14-pixel patches; merged 2x2 -> 4 placeholders per image in input_ids
    assert (batch.input_ids == pad).sum(dim=1).tolist() == [4, 4, 4]
    assert all(m.engine_prompt_ids.count(pad) == 1 for m in batch.multi_modal)
    assert batch.ground_truth == ["0", "1", "2"]


def test_text_only_data_unchanged(qwen_tok):
    """Text rows through a VL model's tokenizer: the tokenizer's own ids, no multi_modal."""
    cfg = DataConfig(prompts=["What is 2+3?"], shuffle=False)
    batch = PromptLoader(load_prompt_rows(cfg), qwen_tok, cfg, batch_size=1).next_batch()
    want = qwen_tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], tokenize=False,
                                        add_generation_prompt=True)
    assert batch.input_ids[0].tolist() == qwen_tok(want, add_special_tokens=False)["input_ids"]
    assert batch.multi_modal == []


# ------------------------------------------------------------------ markers


def test_split_image_markers():
    out = split_image_markers([{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": "Compare <image> and<image>."}], 2, "row 0")
    assert out[0] == {"role": "system", "content": "Be brief."}
    assert out[1]["content"] == [{"type": "text", "text": "Compare "}, {"type": "image"},
                                 {"type": "text", "text": " and"}, {"type": "image"}, {"type": "text", "text": "."}]


@pytest.mark.parametrize("content,n", [("No marker", 1), ("<image><image>two", 1), ("<image>one", 0)])
def test_marker_count_must_match(content, n):
    with pytest.raises(DataError) as err:
        split_image_markers([{"role": "user", "content": content}], n, "train.jsonl line 4")
    assert str(err.value).startswith("train.jsonl line 4:") and f"holds {n} image(s)" in str(err.value)


def test_images_on_a_text_model_is_a_data_error(tiny_qwen2):
    tok = load_tokenizer("tiny:qwen2")
    cfg = DataConfig(prompts=[{"prompt": "<image>hi", "images": [_image()]}])
    with pytest.raises(DataError, match=r"data.prompts\[0\]: the row has images .* not a vision-language model"):
        PromptLoader(load_prompt_rows(cfg), tok, cfg, batch_size=1)


def test_too_long_counts_expanded_tokens(qwen_tok):
    cfg = DataConfig(prompts=[{"prompt": "<image>hi", "images": [_image()]}], max_prompt_length=8,
                     truncation="left")
    with pytest.raises(DataError, match="image placeholders expanded.*cannot cut a prompt with images"):
        PromptLoader(load_prompt_rows(cfg), qwen_tok, cfg, batch_size=1)


# ------------------------------------------------------------------ the processor


def test_expanded_ids_against_engine_ids_qwen(qwen_tok):
    """Qwen2.5-VL: placeholders per image = grid_t * grid_h * grid_w / merge_size**2. The tiny processor
    keeps images within [28*28, 56*56] pixels, rounded to multiples of 28 (patch 14 x merge 2):
      56x56 -> grid (1, 4, 4): 16 patches / 4 = 4 placeholders
      28x56 (h x w) -> grid (1, 2, 4): 8 patches / 4 = 2 placeholders
    The engine's ids hold 1 placeholder per image, so the expanded ids are (4 - 1) + (2 - 1) = 4 longer."""
    proc = qwen_tok.verl_processor
    messages = split_image_markers([{"role": "user", "content": "<image>and<image>?"}], 2, "row")
    text = qwen_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids, mm = encode_with_images(proc, text, [_image(56, 56), _image(28, 56)])
    pad = qwen_tok.convert_tokens_to_ids("<|image_pad|>")
    grid = mm.model_inputs["image_grid_thw"]
    assert grid.tolist() == [[1, 4, 4], [1, 2, 4]]
    assert ids.count(pad) == int((grid.prod(dim=1) // 4).sum()) == 6
    assert mm.engine_prompt_ids.count(pad) == 2 and len(ids) == len(mm.engine_prompt_ids) + 4
    # the non-placeholder tokens are the same, in order
    assert [i for i in ids if i != pad] == [i for i in mm.engine_prompt_ids if i != pad]
    # pixel_values: one row per patch, 3 channels x 2 frames x 14 x 14 = 1176 values
    assert tuple(mm.model_inputs["pixel_values"].shape) == (16 + 8, 1176)


def test_min_max_pixels_reach_the_image_processor(qwen_tok):
    """data.max_pixels = 28*28: a 56x56 image shrinks to 28x28 -> grid (1, 2, 2) -> 1 placeholder."""
    cfg = DataConfig(prompts=[{"prompt": "<image>hi", "images": [_image()]}], max_pixels=28 * 28, shuffle=False)
    batch = PromptLoader(load_prompt_rows(cfg), qwen_tok, cfg, batch_size=1).next_batch()
    assert batch.multi_modal[0].model_inputs["image_grid_thw"].tolist() == [[1, 2, 2]]


def test_expanded_ids_llava(llava_tok):
    """LLaVA: every image is resized and cropped to 28x28; (28 / 14)**2 = 4 patch features (CLS dropped by
    the "default" feature strategy) -> 4 <image> tokens per image; pixel_values (n_images, 3, 28, 28)."""
    text = llava_tok.apply_chat_template(split_image_markers([{"role": "user", "content": "<image>x"}], 1, "r"),
                                         tokenize=False, add_generation_prompt=True)
    ids, mm = encode_with_images(llava_tok.verl_processor, text, [_image(40, 50)])
    token = llava_tok.convert_tokens_to_ids("<image>")
    assert ids.count(token) == 4 and mm.engine_prompt_ids.count(token) == 1
    assert tuple(mm.model_inputs["pixel_values"].shape) == (1, 3, 28, 28)


def test_image_token_ids(qwen_tok, llava_tok):
    names = {qwen_tok.convert_ids_to_tokens(i) for i in image_token_ids(qwen_tok.verl_processor)}
    assert names == {"<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"}
    assert image_token_ids(qwen_tok) == image_token_ids(qwen_tok.verl_processor)
    assert {llava_tok.convert_ids_to_tokens(i) for i in image_token_ids(llava_tok)} == {"<image>"}


# ------------------------------------------------------------------ collate and Batch


def _mm(n_patches, n_images, tag=0):
    return MultiModalInputs(images=(), model_inputs={"pixel_values": torch.full((n_patches, 6), float(tag)),
                                                     "image_grid_thw": torch.ones(n_images, 3, dtype=torch.long)},
                            engine_prompt_ids=[1, 2])


def test_collate_concatenates_rows_with_images_on_dim_0():
    out = collate([_mm(16, 1, tag=1), None, _mm(24, 2, tag=3)])
    assert tuple(out["pixel_values"].shape) == (40, 6) and tuple(out["image_grid_thw"].shape) == (3, 3)
    # row order kept: row 0's patches first
    assert out["pixel_values"][:16].eq(1).all() and out["pixel_values"][16:].eq(3).all()
    assert collate([None, None]) == {} and collate([]) == {}
    llava = [MultiModalInputs((), {"pixel_values": torch.zeros(k, 3, 28, 28)}) for k in (1, 2)]
    assert tuple(collate(llava)["pixel_values"].shape) == (3, 3, 28, 28)


def test_batch_carries_multi_modal():
    a, b = _mm(4, 1, 1), _mm(8, 1, 2)
    batch = Batch(input_ids=torch.zeros(2, 3, dtype=torch.long), multi_modal=[a, b])
    assert batch.select([1]).multi_modal == [b]
    rep = batch.repeat(3)
    assert rep.multi_modal == [a, a, a, b, b, b] and rep.multi_modal[0] is rep.multi_modal[2]  # shared, immutable
    assert [m.model_inputs["pixel_values"].shape[0] for m in batch.split(1)[1].multi_modal] == [8]
    text = Batch(input_ids=torch.zeros(1, 3, dtype=torch.long))
    assert Batch.concat([batch, text]).multi_modal == [a, b, None]  # a text-only batch's rows: None
    assert Batch.concat([text, text]).multi_modal == []
    with pytest.raises(Exception):
        a.images = ()  # frozen
    json.dumps(a.engine_prompt_ids)  # plain ints


def test_hub_layout_processor_loads_without_torchvision(tmp_path):
    """A folder laid out like a hub Qwen2.5-VL checkpoint: the processor class named in
    preprocessor_config.json only, the chat template in chat_template.json only."""
    import os
    import shutil

    from verl.models.tiny_vl import tiny_vl_model_path

    folder = tmp_path / "hub"
    shutil.copytree(tiny_vl_model_path("qwen2_5_vl"), folder)
    os.remove(folder / "processor_config.json")
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps({**pre, "processor_class": "Qwen2_5_VLProcessor"}))
    template = (folder / "chat_template.jinja").read_text()
    os.remove(folder / "chat_template.jinja")
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": template}))
    tok = load_tokenizer(str(folder))
    assert type(tok.verl_processor).__name__ == "Qwen2_5_VLProcessor" and tok.chat_template == template
