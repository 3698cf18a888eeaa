"""Images in prompts: loading them, placing them in the prompt, the processor's tensors per sample.

A row of a vision-language dataset holds its images under `data.image_key` (default "images"),
in one of the layouts real verl and Hugging Face datasets use, and one `<image>` marker per image
in its prompt text (real verl's convention):

    {"prompt": [{"role": "user", "content": "<image>What is the area of the triangle?"}],
     "images": [{"bytes": b"\\x89PNG...", "path": None}], ...}

Each image value may be a PIL image (HF datasets' Image feature decoded), a {"bytes", "path"} dict
(the same feature undecoded, real verl's parquet files), raw encoded bytes, or a file path
(relative to the data file). `load_image` turns any of them into an RGB PIL image.

Placing: `split_image_markers` turns each `<image>` of a message's text into an {"type": "image"}
part (the text around it into {"type": "text"} parts) before the chat template, which writes the
family's image chunk there (Qwen2.5-VL: <|vision_start|><|image_pad|><|vision_end|>, LLaVA:
<image>); without a chat template `<image>` is replaced by that chunk in the text (`image_chunk`).

Tokens: `encode_with_images` runs the processor on the rendered text and the images. The processor
expands each image's single placeholder into as many placeholders as the image has features
(Qwen2.5-VL: grid_t * grid_h * grid_w / merge_size**2; LLaVA: (size / patch)**2): those EXPANDED
ids are the Batch's input_ids, what the HF model takes. vLLM / SGLang take the unexpanded ids
(`MultiModalInputs.engine_prompt_ids`, one placeholder per image) with the images and expand them
themselves.

Batches: `Batch.multi_modal` holds one `MultiModalInputs` (or None for a text-only row) per
sequence; `collate` turns a micro-batch's entries into the model's keyword arguments and
`forward_kwargs` adds what the model family needs on top (Qwen2.5-VL's 3-D rope positions).
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch

from verl.data.sources import DataError

IMAGE_MARKER = "<image>"

# Processor outputs that are not per-sample image tensors: the token ids and mask (the Batch holds them)
# and the per-token modality ids of transformers 5 (mm_token_type_ids, (1, T)): they are a function of
# input_ids, rebuilt for the whole padded micro-batch by `forward_kwargs`.
_TOKEN_KEYS = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids")

# Placeholder tokens of the families verl knows (those the tokenizer has are masked out of responses).
_PLACEHOLDER_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                       "<image>", "<video>")


@dataclass(frozen=True)
class MultiModalInputs:
    """One sample's images and the processor's tensors for them.

    images:           the PIL images (RGB), in prompt order
    model_inputs:     the processor's outputs other than input_ids / attention_mask, for this sample
                      alone: Qwen2.5-VL pixel_values (n_patches, C*T*P*P) and image_grid_thw (n_images, 3);
                      LLaVA pixel_values (n_images, 3, H, W)
    engine_prompt_ids: the rendered prompt tokenized without the processor's expansion (one
                      placeholder per image): what vLLM / SGLang take together with `images`
    Immutable, so Batch.repeat (rollout.n) may share one object between the samples of a prompt.
    """

    images: tuple
    model_inputs: dict = field(default_factory=dict)
    engine_prompt_ids: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "images", tuple(self.images))
        object.__setattr__(self, "engine_prompt_ids", tuple(int(i) for i in self.engine_prompt_ids))


def collate(items: Sequence[Optional[MultiModalInputs]]) -> dict[str, torch.Tensor]:
    """The model's image keyword arguments for a micro-batch whose rows have `items` (None: no images).

    Each key is concatenated along dim 0 over the rows that have images, in row order. That is what
    both families expect: their forward scatters the image features into the placeholder positions of
    input_ids in row-major order (row 0's placeholders first, left to right, then row 1's ...), and
    - Qwen2.5-VL's pixel_values are already all patches of all images stacked (n_patches, D), split
      back per image by image_grid_thw (n_images, 3) -- both stack across rows on dim 0;
    - LLaVA's pixel_values are one (3, H, W) image per dim-0 entry.
    {} when no row has images (a text-only micro-batch of a VL model)."""
    present = [it for it in items if it is not None and it.model_inputs]
    if not present:
        return {}
    keys = present[0].model_inputs.keys()
    return {k: torch.cat([it.model_inputs[k] for it in present], dim=0) for k in keys}


def uses_mrope(config) -> bool:
    """Whether the model computes 3-D (temporal, height, width) rope positions from its image grids."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
    return isinstance(rope, dict) and ("mrope_section" in rope or rope.get("rope_type") == "mrope"
                                       or rope.get("type") == "mrope")


def forward_kwargs(config, input_ids: torch.Tensor, position_ids: Optional[torch.Tensor],
                   items: Sequence[Optional[MultiModalInputs]]) -> dict[str, Any]:
    """Keyword arguments beyond input_ids / attention_mask for one micro-batch of a model with
    config `config`: the collated image tensors (on input_ids' device), and the positions.

    A model with mrope (Qwen2.5-VL) and images gets position_ids=None and mm_token_type_ids (B, T)
    (1 on image placeholders, 2 on video ones, 0 elsewhere): it then builds its 3-D positions from
    input_ids, image_grid_thw and attention_mask (padding skipped, so left-padded prompts and
    right-padded responses get the positions of the unpadded row). Otherwise the usual 1-D
    position_ids (text-only rows: mrope's three sections are then equal to them)."""
    images = {k: v.to(input_ids.device) for k, v in collate(items).items()}
    if not images:
        return {"position_ids": position_ids}
    if uses_mrope(config):
        types = torch.zeros_like(input_ids, dtype=torch.int)
        image_id, video_id = getattr(config, "image_token_id", None), getattr(config, "video_token_id", None)
        if image_id is not None:
            types = types.masked_fill(input_ids == image_id, 1)
        if video_id is not None:
            types = types.masked_fill(input_ids == video_id, 2)
        return {"position_ids": None, "mm_token_type_ids": types, **images}
    return {"position_ids": position_ids, **images}


def without_response_placeholders(config, input_ids: torch.Tensor, response_length: int) -> torch.Tensor:
    """input_ids (B, T) for the trunk, with image/video placeholder ids in the last `response_length`
    columns (a response an engine let generate them) replaced by the pad id: the model's forward
    scatters one image feature into every placeholder and fails when there are more placeholders than
    features. Those tokens are out of the loss already (response_mask 0, verl.rollout.base); the tokens
    after them are conditioned on a pad instead. Returns input_ids itself when there are none."""
    ids = {getattr(config, name, None) for name in ("image_token_id", "video_token_id", "image_token_index")}
    ids = sorted(i for i in ids if isinstance(i, int))
    if not ids or response_length == 0:
        return input_ids
    t = input_ids.shape[1]
    hit = torch.isin(input_ids[:, t - response_length:], torch.tensor(ids, device=input_ids.device))
    if not bool(hit.any()):
        return input_ids
    pad = getattr(config.get_text_config() if hasattr(config, "get_text_config") else config, "pad_token_id", None)
    out = input_ids.clone()
    out[:, t - response_length:] = out[:, t - response_length:].masked_fill(hit, 0 if pad is None else pad)
    return out


# ---------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------


def load_image(value: Any, origin: str, base_dir: Optional[str] = None, key: str = "images"):
    """An RGB PIL image from a PIL image, a {"bytes", "path"} dict, encoded bytes or a file path
    (relative paths are taken from `base_dir`, the data file's folder). A bad value raises DataError
    naming `origin` (the file and row) and `key`."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, dict):
        data, path = value.get("bytes"), value.get("path")
        if data is None and not path:
            raise DataError(f"{origin}: {key}: an image dict with neither 'bytes' nor 'path'")
        value = data if data is not None else path
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return Image.open(io.BytesIO(bytes(value))).convert("RGB")
        except Exception as exc:  # noqa: BLE001 - PIL raises several types for bad bytes
            raise DataError(f"{origin}: {key}: bytes that are not an image ({type(exc).__name__})") from None
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        full = path if os.path.isabs(path) or not base_dir else os.path.join(base_dir, path)
        if not os.path.exists(full):
            raise DataError(f"{origin}: {key}: image file '{path}' does not exist (looked at {full})")
        try:
            with Image.open(full) as img:
                return img.convert("RGB")
        except Exception as exc:  # noqa: BLE001
            raise DataError(f"{origin}: {key}: '{path}' is not an image ({type(exc).__name__})") from None
    raise DataError(f"{origin}: {key}: expected an image (PIL image, {{'bytes', 'path'}} dict, bytes or a "
                    f"file path), got {type(value).__name__}")


def load_images(value: Any, origin: str, base_dir: Optional[str] = None, key: str = "images") -> tuple:
    """All images of one row's `key` value (a list of images, or one image); () for None / []."""
    if value is None:
        return ()
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return tuple(load_image(v, f"{origin}", base_dir, f"{key}[{i}]") for i, v in enumerate(values))


# ---------------------------------------------------------------------------
# Markers and the processor
# ---------------------------------------------------------------------------


def count_markers(messages: Sequence[dict]) -> int:
    return sum(m["content"].count(IMAGE_MARKER) for m in messages if isinstance(m.get("content"), str))


def check_marker_count(messages: Sequence[dict], num_images: int, where: str, key: str = "images") -> None:
    found = count_markers(messages)
    if found != num_images:
        raise DataError(f"{where}: the prompt has {found} '{IMAGE_MARKER}' marker(s) but {key} holds "
                        f"{num_images} image(s); put one '{IMAGE_MARKER}' where each image goes")


def split_image_markers(messages: Sequence[dict], num_images: int, where: str, key: str = "images") -> list[dict]:
    """`messages` with each text content holding `<image>` split into parts (real verl's rule):
    "a<image>b" -> [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]
    (empty text parts dropped). The number of markers must equal `num_images` (DataError naming
    `where` otherwise)."""
    check_marker_count(messages, num_images, where, key)
    out = []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, str) or IMAGE_MARKER not in content:
            out.append(dict(m))
            continue
        parts = []
        for piece in re.split(f"({re.escape(IMAGE_MARKER)})", content):
            if piece == IMAGE_MARKER:
                parts.append({"type": "image"})
            elif piece:
                parts.append({"type": "text", "text": piece})
        out.append({**m, "content": parts})
    return out


def _tokenizer_of(processor_or_tokenizer):
    return getattr(processor_or_tokenizer, "tokenizer", None) or processor_or_tokenizer


def _has_token(tok, token: str) -> bool:
    return token in tok.get_vocab()


def image_chunk(processor) -> str:
    """The text one image stands for before expansion (Qwen: <|vision_start|><|image_pad|><|vision_end|>,
    LLaVA: <image>): what `<image>` becomes in a prompt rendered without a chat template."""
    tok = _tokenizer_of(processor)
    token = getattr(processor, "image_token", None) or IMAGE_MARKER
    if _has_token(tok, "<|vision_start|>") and _has_token(tok, "<|vision_end|>"):
        return f"<|vision_start|>{token}<|vision_end|>"
    return token


def image_token_ids(processor_or_tokenizer) -> set[int]:
    """Ids of the image/video placeholder and delimiter tokens the tokenizer has: a response token
    among them is not the policy's text (response_mask 0)."""
    tok = _tokenizer_of(processor_or_tokenizer)
    vocab = tok.get_vocab()
    names = set(_PLACEHOLDER_TOKENS)
    for attr in ("image_token", "video_token"):
        value = getattr(processor_or_tokenizer, attr, None)
        if isinstance(value, str):
            names.add(value)
    return {vocab[n] for n in names if n in vocab}


def encode_with_images(processor, text: str, images: Sequence, where: str = "row",
                       image_kwargs: Optional[dict] = None) -> tuple[list[int], MultiModalInputs]:
    """(expanded input ids, MultiModalInputs) for the rendered prompt `text` (one image chunk per
    image, in order) and its `images`. `image_kwargs`: passed to the processor's image processor
    (e.g. min_pixels / max_pixels). Special tokens are those the text holds (a chat template writes them)."""
    tok = _tokenizer_of(processor)
    try:
        out = processor(text=[text], images=list(images), return_tensors="pt", add_special_tokens=False,
                        **({"images_kwargs": image_kwargs} if image_kwargs else {}))
    except (ValueError, TypeError) as exc:
        raise DataError(f"{where}: the processor refused the prompt and its {len(images)} image(s): "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    ids = out["input_ids"][0].tolist()
    model_inputs = {k: v for k, v in out.items() if k not in _TOKEN_KEYS and isinstance(v, torch.Tensor)}
    engine_ids = tok(text, add_special_tokens=False)["input_ids"]
    return ids, MultiModalInputs(images=tuple(images), model_inputs=model_inputs, engine_prompt_ids=tuple(engine_ids))
