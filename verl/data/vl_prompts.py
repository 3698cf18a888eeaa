"""Prompt rows with images -> rendered text, the processor's expanded ids, MultiModalInputs.

Used by PromptLoader (verl/data/prompts.py) for the rows that have images; text-only rows never
come here, so text data behaves exactly as before. The processor is the one verl.models.loading
attached to the model's tokenizer (`processor_of`): a row with images and a text-only model is a
DataError naming the row and `model.name`.
"""

from __future__ import annotations

from typing import Optional

from verl.data.multimodal import (IMAGE_MARKER, check_marker_count, encode_with_images, image_chunk, load_images,
                                  split_image_markers)
from verl.data.sources import DataError, PromptRow


def processor_of(tokenizer):
    """The processor of a vision-language model's tokenizer (verl.models.loading.load_tokenizer attaches
    it as `verl_processor`), or None for a text model's."""
    return getattr(tokenizer, "verl_processor", None)


def image_processor_kwargs(processor, data_cfg) -> dict:
    """data.min_pixels / data.max_pixels as the image processor takes them: Qwen2-VL-family processors'
    size {"shortest_edge", "longest_edge"} (pixel counts); {} when neither is set. A processor without
    pixel bounds (LLaVA's CLIP: a fixed crop) is a DataError naming the keys."""
    if data_cfg.min_pixels is None and data_cfg.max_pixels is None:
        return {}
    ip = processor.image_processor
    if not hasattr(ip, "merge_size"):  # the pixel-count sizing is the Qwen2-VL family's
        raise DataError(f"data.min_pixels / data.max_pixels: {type(ip).__name__} resizes to a fixed size and "
                        "takes no pixel bounds; leave both unset for this model")
    own = getattr(ip, "size", None)  # a SizeDict (transformers 5) or a dict; its pixel bounds
    bounds = {k: own.get(k) if isinstance(own, dict) else getattr(own, k, None)
              for k in ("shortest_edge", "longest_edge")}
    if data_cfg.min_pixels is not None:
        bounds["shortest_edge"] = data_cfg.min_pixels
    if data_cfg.max_pixels is not None:
        bounds["longest_edge"] = data_cfg.max_pixels
    return {"size": bounds}


def encode_image_rows(rows: list[PromptRow], tokenizer, data_cfg, tools: Optional[list] = None):
    """(rendered texts, expanded ids, MultiModalInputs) for `rows`, each with images."""
    from verl.data.prompts import prompt_messages, uses_chat_template

    processor = processor_of(tokenizer)
    if processor is None:
        raise DataError(f"{rows[0].origin}: the row has images ({data_cfg.image_key}) but model.name is not a "
                        "vision-language model (its config.json has no vision_config)")
    kwargs = image_processor_kwargs(processor, data_cfg)
    texts, ids, items = [], [], []
    for row in rows:
        images = load_images(row.images, row.origin, row.base_dir, data_cfg.image_key)
        messages = prompt_messages(row.prompt, data_cfg)
        if uses_chat_template(tokenizer, data_cfg):
            parts = split_image_markers(messages, len(images), row.origin, data_cfg.image_key)
            text = tokenizer.apply_chat_template(parts, tokenize=False, add_generation_prompt=True,
                                                 **({"tools": tools} if tools else {}),
                                                 **data_cfg.chat_template_kwargs)
        else:  # plain text: each marker becomes the family's image chunk
            check_marker_count(messages, len(images), row.origin, data_cfg.image_key)
            text = "\n".join(str(m["content"]) for m in messages).replace(IMAGE_MARKER, image_chunk(processor))
        row_ids, mm = encode_with_images(processor, text, images, row.origin, kwargs)
        texts.append(text)
        ids.append(row_ids)
        items.append(mm)
    return texts, ids, items
