"""How images reach the vLLM engine: requests, engine keywords, and the check that vLLM expanded each
prompt as the actor's processor did. Pure functions over the engine's pieces; VLLMRollout
(verl/rollout/vllm_rollout.py) calls them.

Vision-language models (a `vision_config` in the folder's config.json; docs/vision_language.md).
A prompt row with images (`Batch.multi_modal[i]`, a verl.data.multimodal.MultiModalInputs) is sent
as {"prompt_token_ids": engine_prompt_ids, "multi_modal_data": {"image": [PIL images]}}: the
prompt with one image-pad token per image, which vLLM's own processor expands into the image's
patch tokens. The returned Batch keeps the prompts Batch's input_ids, the prompt the actor's
processor expanded, so the actor and the engine see the same tokens; that vLLM expanded it to
exactly those ids is checked for every such request (a different patch count, e.g. from
data.min_pixels / data.max_pixels not reaching one side, is an error, not a silent mismatch).
The engine starts with `limit_mm_per_prompt` (rollout.limit_images, no video) and the data's
min/max pixels as `mm_processor_kwargs`. The vision tower's weights are synced under their HF
names like every other weight (verl/rollout/in_process.py, model.freeze_vision_tower).
"""

from __future__ import annotations

import json
import os
from typing import Callable, Optional

from verl.batch import Batch
from verl.data.sources import DataError
from verl.rollout.token_io import unpadded_rows


def folder_config(model_path: str) -> dict:
    """The folder's config.json ({} for a hub name: vLLM resolves and checks it)."""
    cfg_file = os.path.join(model_path, "config.json")
    if not os.path.exists(cfg_file):
        return {}
    with open(cfg_file, encoding="utf-8") as fh:
        return json.load(fh)


def is_vision_language(model_cfg: dict) -> bool:
    """A vision-language checkpoint (Qwen2.5-VL, LLaVA, ...): its config.json has a vision tower."""
    return "vision_config" in model_cfg


def multimodal_engine_args(model_cfg: dict, limit_images: Optional[int], mm_processor_kwargs: Optional[dict]) -> dict:
    """vllm.LLM keywords for a vision-language model ({} for a text model, whose engine is unchanged):
    at most `limit_images` images per prompt (None: vLLM's own limit) and no video (a model with a
    video token would otherwise reserve memory for, and profile, video inputs the data never has);
    the image processor's keywords (min/max pixels), the same the actor's processor got."""
    if not is_vision_language(model_cfg):
        return {}
    limits = {} if limit_images is None else {"image": int(limit_images)}
    if model_cfg.get("video_token_id") is not None:
        limits["video"] = 0
    args = {"limit_mm_per_prompt": limits} if limits else {}
    if mm_processor_kwargs:
        args["mm_processor_kwargs"] = dict(mm_processor_kwargs)
    return args


def multimodal_request(prompt_cls, row: int, prompt_ids: list, mm, vision_language: bool, image_limit: int):
    """One prompt row's request (a vllm TokensPrompt, `prompt_cls`): token ids only, or with images (a
    MultiModalInputs) the prompt before the processor's expansion (one image-pad token per image) and the
    images, which vLLM's processor expands into patch tokens itself. A row the engine cannot take is a
    DataError (a data row at fault: exit 2, like any bad row)."""
    if mm is None or not mm.images:
        return prompt_cls(prompt_token_ids=prompt_ids)
    if not vision_language:
        raise DataError(f"prompt row {row} has {len(mm.images)} image(s) but the vLLM engine's model has no "
                        "vision tower (no vision_config in its config.json); use a vision-language model.name")
    if len(mm.images) > image_limit:
        raise DataError(f"rollout.limit_images: prompt row {row} has {len(mm.images)} images, the vLLM engine "
                        f"takes at most {image_limit} per prompt; raise rollout.limit_images")
    return prompt_cls(prompt_token_ids=list(mm.engine_prompt_ids), multi_modal_data={"image": list(mm.images)})


def check_expanded_prompts(prompts: Batch, outputs: list, copies: int, image_token_id: Callable[[], Optional[int]]) -> int:
    """Each multi-modal request's prompt as vLLM expanded it (RequestOutput.prompt_token_ids; `copies`
    outputs per prompt row) must be the prompts Batch's row (the actor's processor's expansion): else the
    two computed a different number of patches per image and the actor's log-probs would be of another
    prompt. Returns how many were checked. (A vLLM that reports the prompt as it was sent, unexpanded,
    cannot be checked so: those are not counted; tests/gpu/test_gpu_vllm_vl.py asserts the count.)"""
    mm = getattr(prompts, "multi_modal", None) or ()
    if not any(x is not None for x in mm):
        return 0
    rows = unpadded_rows(prompts.input_ids, prompts.attention_mask)
    checked = 0
    for k, out in enumerate(outputs):
        i = k // copies
        if mm[i] is None or not mm[i].images:
            continue
        got = list(out.prompt_token_ids)
        if got == list(mm[i].engine_prompt_ids) and got != rows[i]:
            continue  # this vLLM reports the prompt as sent, not as expanded: nothing to compare
        if got != rows[i]:
            image_token = image_token_id()
            n_got, n_want = got.count(image_token), rows[i].count(image_token)
            raise RuntimeError(
                f"prompt row {i}: vLLM expanded the prompt to {len(got)} tokens ({n_got} image tokens), the actor's "
                f"processor to {len(rows[i])} ({n_want} image tokens): the two resized the image differently; "
                "data.min_pixels / data.max_pixels must reach both (they do through verl's config; a processor "
                "config edited in one of the folders does not)")
        checked += 1
    return checked
