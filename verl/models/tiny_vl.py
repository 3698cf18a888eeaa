"""Tiny random vision-language models: `model.name: tiny:qwen2_5_vl` and `tiny:llava`.

Like the text models of verl/models/tiny.py (whose BPE tokenizer they reuse, with the image
special tokens added), they are built locally in seconds, need no hub, and are cached under
`$VERL_CACHE/tiny/<family>-v<version>` as a normal Hugging Face folder: the weights, the tokenizer
with its chat template, the image processor (the PIL backend: torchvision is not needed) and
processor_config.json, so that `AutoModelForImageTextToText` and `AutoProcessor` (with torchvision,
or verl.models.loading.load_processor without it) load them.

* qwen2_5_vl: Qwen2_5_VLForConditionalGeneration, a 1-block vision tower (hidden 32, patch 14,
  spatial merge 2) and a 2-layer text model (hidden 64, mrope); the image processor keeps images
  between 28x28 and 56x56 pixels, so a 56x56 image is a (1, 4, 4) grid of 16 patches, 4 image-pad
  tokens in the prompt after the 2x2 merge.
* llava: LlavaForConditionalGeneration, a 1-layer CLIP vision tower on 28x28 images (patch 14:
  2x2 = 4 patches + CLS; the "default" feature strategy drops CLS, so 4 `<image>` tokens per image)
  and a 2-layer Llama text model.

Random weights: the models produce noise, which is all the tests need (images change the
log-probs; the loop, checkpoints and resume run).
"""

from __future__ import annotations

import json
import os

TINY_VL_FAMILIES = ("qwen2_5_vl", "llava")
TINY_VL_VERSION = 1  # bump when the build changes

# Renders string contents as they are and list contents part by part, an image part as the family's
# image chunk (real verl splits "<image>" markers into {"type": "image"} parts before the template).
_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}IMAGE_CHUNK"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_IMAGE_CHUNK = {"qwen2_5_vl": "<|vision_start|><|image_pad|><|vision_end|>", "llava": "<image>"}
_SPECIALS = {"qwen2_5_vl": ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"],
             "llava": ["<image>"]}


def _tokenizer(family: str, vocab_size: int):
    from verl.models.tiny import _train_tokenizer

    tok = _train_tokenizer("qwen2", vocab_size)
    # additional_special_tokens replaces the list: keep <|im_start|> in it
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *_SPECIALS[family]]})
    tok.chat_template = _CHAT_TEMPLATE.replace("IMAGE_CHUNK", _IMAGE_CHUNK[family])
    return tok


def _qwen(tok, hidden: int, layers: int):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLImageProcessorPil

    ids = tok.convert_tokens_to_ids
    heads = max(1, hidden // 32)
    head_dim = hidden // heads
    # mrope splits the rotary half-dimension (head_dim / 2) into temporal, height, width sections
    half = head_dim // 2
    section = [half - 2 * (half // 3), half // 3, half // 3]
    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=1,
                         max_position_embeddings=1024, tie_word_embeddings=True,
                         rope_scaling={"type": "mrope", "mrope_section": section},
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=1, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=hidden, window_size=56,
                           fullatt_block_indexes=[0], in_channels=3),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True)
    model = Qwen2_5_VLForConditionalGeneration(config)
    image_processor = Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=56 * 56, patch_size=14,
                                               temporal_patch_size=2, merge_size=2)
    return model, image_processor, {"processor_class": "Qwen2_5_VLProcessor"}


def _llava(tok, hidden: int, layers: int):
    from transformers import CLIPImageProcessorPil, CLIPVisionConfig, LlamaConfig, LlavaConfig, \
        LlavaForConditionalGeneration

    heads = max(1, hidden // 32)
    text = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=1, head_dim=hidden // heads,
                       max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=1,
                              image_size=28, patch_size=14, projection_dim=32)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=tok.convert_tokens_to_ids("<image>"),
                         vision_feature_select_strategy="default", vision_feature_layer=-1,
                         projector_hidden_act="gelu", tie_word_embeddings=True, pad_token_id=tok.pad_token_id)
    model = LlavaForConditionalGeneration(config)
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    processor_config = {"processor_class": "LlavaProcessor", "patch_size": 14, "image_token": "<image>",
                        "vision_feature_select_strategy": "default", "num_additional_image_tokens": 1}
    return model, image_processor, processor_config


def build_tiny_vl_model(family: str, out_dir: str, hidden: int = 64, layers: int = 2, vocab_size: int = 512,
                        seed: int = 0) -> str:
    """Write a tiny random `family` VL model with its processor files to `out_dir`; return the path."""
    import torch

    if family not in TINY_VL_FAMILIES:
        raise ValueError(f"unknown tiny vision-language family '{family}'; choose one of {', '.join(TINY_VL_FAMILIES)}")
    tok = _tokenizer(family, vocab_size)
    torch.manual_seed(seed)
    model, image_processor, processor_config = (_qwen if family == "qwen2_5_vl" else _llava)(tok, hidden, layers)
    model.eval()
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    image_processor.save_pretrained(out_dir)
    # The processor's own files, written by hand: building Qwen2_5_VLProcessor needs its video processor,
    # which needs torchvision. Loading them back: verl.models.loading.load_processor.
    with open(os.path.join(out_dir, "processor_config.json"), "w") as fh:
        json.dump(processor_config, fh, indent=2)
    return out_dir


def tiny_vl_model_path(family: str) -> str:
    """Path of the cached `tiny:<family>` VL model, building it once (atomically) if missing."""
    from verl.models.tiny import cached_build

    return cached_build(f"{family}-vl{TINY_VL_VERSION}", lambda tmp: build_tiny_vl_model(family, tmp),
                        {"family": family}, f"building the tiny vision-language model tiny:{family} once (seconds)")
