"""Real verl's vision-language keys -> this project's config: rows of `verl.compat.real_verl.TABLE`.

Real verl (0.9.x) reads a row's images from the column `data.image_key` (default `images`: a list of
{"bytes", "path"} dicts, as examples/data_preprocess/geo3k.py writes them) and the `<image>` markers
of its prompt; the model's processor turns them into pixels and image tokens. Here the same layout
is read by verl.data.multimodal (`data.image_key`), with the processor's pixel bounds as
`data.min_pixels` / `data.max_pixels`.

    data.image_key                       -> data.image_key
    data.mm_processor_kwargs.min_pixels  -> data.min_pixels      (max_pixels likewise; other entries refused)
    actor_rollout_ref.actor.freeze_vision_tower -> model.freeze_vision_tower
    data.video_key, data.audio_key       accepted while the data has no such column; videos/audio refused
    actor_rollout_ref.rollout.limit_images -> rollout.limit_images
    data.image_patch_size, data.return_multi_modal_inputs, the Megatron LoRA's freeze_vision_*,
    vLLM's disable_mm_preprocessor_cache: accepted, with the reason in the note
"""

from __future__ import annotations

import json
import os

from verl.compat.real_keys import ACTOR, ARR, ROLLOUT, as_bool, as_int, ignored, refuse, to
from verl.errors import ConfigError

# real verl's processor arguments (data.mm_processor_kwargs) that have a home here
PIXEL_KEYS = {"min_pixels": "data.min_pixels", "max_pixels": "data.max_pixels"}


def _mm_processor_kwargs(value, ctx, key):
    """Real verl passes these to the model's processor call: the pixel bounds map to ours; any
    other argument would change the processor's output in a way not reproduced here."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key}={value!r}: expected a mapping, e.g. {{min_pixels: 3136, max_pixels: 1003520}}")
    out = {}
    for name, v in value.items():
        if name not in PIXEL_KEYS:
            raise refuse(f"{key}.{name}", v, f"extra arguments to the model's processor; only "
                                             f"{', '.join(PIXEL_KEYS)} have a home here "
                                             f"({', '.join(PIXEL_KEYS.values())})")
        out[PIXEL_KEYS[name]] = as_int(v, f"{key}.{name}", low=1)
    return out


def _files(ctx) -> list[str]:
    out = []
    for k in ("data.train_files", "data.val_files"):
        files = ctx.our(k) or []
        out += files if isinstance(files, list) else [files]
    return [str(f) for f in out]


def _column_holds_data(path: str, column: str) -> bool:
    """Does the data file have `column` with a non-empty value in some row? (parquet: read that
    column only; json/jsonl: the records)."""
    if not os.path.isfile(path):
        return False  # the data reader reports a missing file with its own line
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        if column not in pq.read_schema(path).names:
            return False
        values = pq.read_table(path, columns=[column]).column(column).to_pylist()
    else:
        values = []
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        try:
            records = json.loads(text) if path.endswith(".json") else [json.loads(line) for line in
                                                                         text.splitlines() if line.strip()]
        except ValueError:
            return False  # the data reader reports bad JSON with its own line
        for r in records if isinstance(records, list) else []:
            if isinstance(r, dict):
                values.append(r.get(column))
    return any(v not in (None, [], "", {}) for v in values)


def _no_media(kind: str):
    """data.video_key / data.audio_key: real verl reads that column when the rows have it. Only
    images are read here, so a file whose rows hold videos (audio) is refused; the key alone
    (real verl's default name, no such column) changes nothing."""

    def convert(value, ctx, key):
        if value is None:
            return {}
        for path in _files(ctx):
            if _column_holds_data(path, str(value)):
                raise refuse(key, value, f"{path} has {kind} in its '{value}' column; only images are read "
                                         f"here (data.image_key)")
        return {}

    return convert


def packing(value, ctx, key):
    """use_remove_padding -> training.use_packed_samples, except for a vision-language model: a packed
    row of several sequences cannot carry their images here, so it trains padded (unset: our auto,
    which does not pack one); packing and padding compute the same update (speed only)."""
    if value is None:
        return {}
    packed = as_bool(value, key)
    if packed and _vision_model(ctx):
        ctx.notes.append(f"{key}=True: {ctx.our('model.name')} is a vision-language model, which trains padded "
                         f"here (packed rows cannot carry images; the same update, speed only)")
        return {}
    return {"training.use_packed_samples": packed}


def _vision_model(ctx) -> bool:
    from verl.models.loading import is_vision_language

    name = ctx.our("model.name")
    return bool(name) and is_vision_language(str(name), trust_remote_code=bool(ctx.our("model.trust_remote_code",
                                                                                      False)))


ENTRIES: list = [
    ("data.image_key", to("data.image_key", default="images",
                          note="the column of each row's images ({bytes, path} dicts, as real verl's geo3k "
                               "preprocessing writes); rows without it are text only")),
    ("data.video_key", dict(convert=_no_media("videos"), target="(checked)", default="videos", phase=2,
                            note="accepted while no row has videos in that column; videos are refused")),
    ("data.audio_key", dict(convert=_no_media("audio"), target="(checked)", default="audios", phase=2,
                            note="accepted while no row has audio in that column; audio is refused")),
    ("data.mm_processor_kwargs", dict(convert=_mm_processor_kwargs, target="data.min_pixels + data.max_pixels",
                                      dict_value=True,
                                      note="the processor's min_pixels / max_pixels; other entries are "
                                           "refused")),
    ("data.image_patch_size", ignored("images are resized by the model's processor with its own patch size, "
                                      "as real verl 0.9's rollout (agent loop) does")),
    ("data.return_multi_modal_inputs", ignored("read by real verl 0.9.1's dataset but used nowhere there; the "
                                               "actor's forward always gets the images here")),
    (f"{ACTOR}.freeze_vision_tower", to("model.freeze_vision_tower", as_bool,
                                        note="the vision tower's weights are not trained (real verl 0.9.1 "
                                             "declares the key; its older FSDP worker froze the tower)")),
    # Real verl's `model.lora` block is its Megatron engine's LoRA (target modules linear_qkv, ...); its FSDP
    # engine, the one this table maps, uses lora_rank / target_modules / exclude_modules and reads none of these.
    (f"{ARR}.model.lora.freeze_vision_model", ignored("real verl's Megatron LoRA only (its FSDP engine, the one "
                                                      "mapped here, does not read it); LoRA here: see "
                                                      "model.exclude_modules")),
    (f"{ARR}.model.lora.freeze_vision_projection", ignored("real verl's Megatron LoRA only (as "
                                                           "freeze_vision_model)")),
    (f"{ROLLOUT}.limit_images", to("rollout.limit_images", as_int,
                                    note="vLLM's images per prompt (limit_mm_per_prompt); null: vLLM's own")),
    (f"{ROLLOUT}.engine_kwargs.vllm.disable_mm_preprocessor_cache",
     ignored("vLLM's cache of processed images: speed and memory only")),
]
