"""Vision-language RL on the CPU/HF path with the tiny random VL models (tiny:qwen2_5_vl, tiny:llava):
the loop, images reaching the model, padding and micro-batch invariance, the frozen vision tower,
checkpoint + resume, LoRA, placeholder masking and the refusals."""

import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import capture_first_grads, small_overrides
from verl import create_trainer, load_config
from verl.config import ConfigError
from verl.data.multimodal import encode_with_images, split_image_markers
from verl.models.loading import check_vision_language, load_processor
from verl.models.vision import is_vision_name
from verl.rollout.base import assemble_rollout
from verl.workers.actor import Actor

FAMILIES = ("qwen2_5_vl", "llava")


def _image(seed, h=56, w=56):
    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((h, w, 3)) * 255).astype("uint8"))


@pytest.fixture(scope="module")
def vl_data(tmp_path_factory):
    """8 rows as real verl lays them out (chat prompt with <image>, images by relative path), one
    of them with two images and one text-only, in a jsonl file."""
    folder = tmp_path_factory.mktemp("vl_data")
    (folder / "imgs").mkdir()
    rows = []
    for i in range(8):
        _image(i, 56, 56 if i % 2 else 28).save(folder / "imgs" / f"{i}.png")
        row = {"data_source": "geo", "prompt": [{"role": "user", "content": f"<image>What is {i} + 1?"}],
               "images": [f"imgs/{i}.png"], "reward_model": {"ground_truth": str(i + 1)}}
        if i == 3:
            row["prompt"][0]["content"] = "<image>Compare<image>."
            row["images"] = ["imgs/3.png", "imgs/0.png"]
        if i == 5:
            row["prompt"][0]["content"] = "What is 5 + 1?"
            del row["images"]
        rows.append(row)
    path = folder / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def varied_reward(prompts, responses, samples):
    """A score that differs between random responses (string_match gives the tiny random models' noise
    one score, so GRPO's advantages and the gradients would be zero)."""
    return [sum(map(ord, r)) % 7 / 7 for r in responses]


def _config(tmp_path, family, data, **extra):
    over = {"model.name": f"tiny:{family}", "algorithm.name": "grpo", "data.train_files": f"[{data}]",
            "training.batch_size": 2, "rollout.n": 2, "rollout.max_new_tokens": 6,
            "reward_fn.type": "python", "reward_fn.function": f"{os.path.abspath(__file__)}:varied_reward"}
    over.update(extra)
    return load_config(None, small_overrides(tmp_path, **over))


def _params(module, pick=lambda n: True):
    return {n: p.detach().clone() for n, p in module.named_parameters() if pick(n)}


# ------------------------------------------------------------------ the loop


@pytest.mark.parametrize("family", FAMILIES)
def test_two_grpo_steps_save_a_vl_folder(tmp_path, family, vl_data):
    cfg = _config(tmp_path, family, vl_data)
    trainer = create_trainer(cfg)
    before = _params(trainer.actor.model)
    for _ in range(2):
        metrics = trainer.step()
        assert all(np.isfinite(metrics[k]) for k in ("reward", "pg_loss", "entropy", "response_length"))
    assert trainer.run.last_batch.multi_modal  # the trained batch held the images
    changed = [n for n, p in trainer.actor.model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert any(is_vision_name(n) for n in changed) and any(not is_vision_name(n) for n in changed)
    # The final actor folder loads again as a VL model with its processor
    from transformers import AutoModelForImageTextToText

    out = cfg.checkpoint.save_dir
    assert os.path.exists(os.path.join(out, "processor_config.json"))
    loaded = AutoModelForImageTextToText.from_pretrained(out)
    for name, p in loaded.state_dict().items():
        assert torch.equal(p, trainer.actor.model.state_dict()[name].float()), name
    assert type(load_processor(out)).__name__ == type(trainer.tokenizer.verl_processor).__name__


# ------------------------------------------------------------------ the actor's forward


def _actor(tmp_path, family, data, **extra):
    cfg = _config(tmp_path, family, data, **extra)
    from verl.models.loading import load_tokenizer

    torch.manual_seed(0)
    return Actor.from_config(cfg, torch.device("cpu")), load_tokenizer(cfg.model.name), cfg


def _batch(tok, cfg, responses, rows=(0, 3, 5)):
    """A rollout batch over prompt rows `rows` of the data with hand-made responses."""
    from verl.data.prompts import PromptLoader, load_prompt_rows

    loader = PromptLoader(load_prompt_rows(cfg.data), tok, cfg.data, batch_size=1, shuffle=False)
    prompts = loader.make_batch(list(rows), list(rows))
    return assemble_rollout(prompts, responses, None, tok, 8)


def _responses(tok):
    ids = tok("The answer is 42 and more", add_special_tokens=False)["input_ids"]
    return [ids[:5], ids[:2], ids[:4] + [tok.eos_token_id]]


@pytest.mark.parametrize("family", FAMILIES)
def test_padded_rows_equal_unpadded_and_micro_batch_invariant(tmp_path, family, vl_data):
    """Three rows (1 image, 2 images, text only) of different prompt and response lengths, so left
    prompt padding and right response padding: each row's log-probs in the padded batch equal that row
    run alone (no padding at all after trim_padding; Qwen's 3-D rope positions skip the padding), and
    micro-batches of 1 row equal one of 4. Float tolerance: other matmul shapes, other summation order."""
    actor, tok, cfg = _actor(tmp_path, family, vl_data, **{"training.micro_batch_size": 4})
    batch = _batch(tok, cfg, _responses(tok))
    assert batch.attention_mask[:, 0].tolist().count(0) >= 1  # some prompt is left-padded
    together, _ = actor.compute_log_probs(batch)
    mask = batch.response_mask.bool()
    for i in range(len(batch)):
        alone, _ = actor.compute_log_probs(batch.select([i]))
        r = alone.shape[1]
        assert torch.allclose(together[i, :r][mask[i, :r]], alone[0][mask[i, :r]], atol=1e-5, rtol=1e-5), i
    actor.micro = actor.micro.__class__(1)
    one_by_one, _ = actor.compute_log_probs(batch)
    assert torch.allclose(one_by_one[mask], together[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_image_changes_the_log_probs(tmp_path, family, vl_data):
    """The same tokens with another image of the same size (so the same placeholder count): the
    response log-probs change; with the same image they are identical."""
    actor, tok, cfg = _actor(tmp_path, family, vl_data)
    batch = _batch(tok, cfg, _responses(tok)[:1], rows=(0,))
    base, _ = actor.compute_log_probs(batch)
    mm = batch.multi_modal[0]
    text = batch.prompt_text[0]
    ids, other = encode_with_images(tok.verl_processor, text, [_image(99, *mm.images[0].size[::-1])])
    assert ids == batch.input_ids[0, :len(ids)].tolist()  # the same tokens
    swapped, _ = actor.compute_log_probs(batch.replace(multi_modal=[other]))
    same, _ = actor.compute_log_probs(batch.replace(multi_modal=[mm]))
    mask = batch.response_mask.bool()
    assert torch.equal(same, base)
    assert (swapped - base)[mask].abs().max() > 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_update_gradient_micro_batch_invariant(tmp_path, monkeypatch, family, vl_data):
    """The first optimizer step's gradients with micro-batches of 1 and of 4 sequences (the same
    sampled batch: the rollout does not depend on micro-batching): equal to float tolerance
    (tests/trainer/test_trainer.py's bound: atol 1e-5 * max|g|, rtol 1e-4)."""
    grads = {}
    for micro in (1, 4):
        captured = capture_first_grads(monkeypatch)
        cfg = _config(tmp_path / f"m{micro}", family, vl_data, **{"training.micro_batch_size": micro,
                                                                   "training.total_steps": 1})
        create_trainer(cfg).step()
        grads[micro] = captured["actor"]
    assert len(grads[1]) == len(grads[4]) > 0
    scale = max(float(g.abs().max()) for g in grads[1])
    assert scale > 1e-6  # a real gradient (not zero advantages)
    # The bound relative to the largest gradient of the model, not of each tensor: some vision tensors
    # have a true gradient of ~0 (e.g. LLaVA's CLS path, dropped by the "default" feature strategy), where
    # rounding noise (~1e-11) is all there is
    for i, (a, b) in enumerate(zip(grads[1], grads[4])):
        assert torch.allclose(a, b, atol=1e-5 * scale, rtol=1e-4), (i, (a - b).abs().max())


# ------------------------------------------------------------------ freezing, LoRA


def test_freeze_vision_tower(tmp_path, vl_data):
    trainer = create_trainer(_config(tmp_path, "qwen2_5_vl", vl_data, **{"model.freeze_vision_tower": "true"}))
    model = trainer.actor.model
    vision = _params(model, is_vision_name)
    language = _params(model, lambda n: not is_vision_name(n))
    assert vision and all(not p.requires_grad for n, p in model.named_parameters() if is_vision_name(n))
    in_optimizer = {id(p) for g in trainer.actor.optimizer.param_groups for p in g["params"]}
    assert not any(id(p) in in_optimizer for n, p in model.named_parameters() if is_vision_name(n))
    trainer.step()
    for n, p in model.named_parameters():
        if is_vision_name(n):
            assert torch.equal(p.detach(), vision[n]), n  # bitwise: never touched
    assert any(not torch.equal(p.detach(), language[n]) for n, p in model.named_parameters() if n in language)


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_adapts_the_language_model_only(tmp_path, family, vl_data):
    trainer = create_trainer(_config(tmp_path, family, vl_data, **{"model.lora.rank": 4}))
    model = trainer.actor.model
    adapted = [n for n, _ in model.named_parameters() if "lora_A" in n]
    assert adapted and not any(is_vision_name(n) for n in adapted)
    before = _params(model, lambda n: "lora_B" in n)
    assert np.isfinite(trainer.step()["pg_loss"])
    assert any(not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters() if n in before)


# ------------------------------------------------------------------ checkpoint and resume


@pytest.mark.parametrize("family,extra", [("qwen2_5_vl", {}), ("llava", {"model.lora.rank": 4})])
def test_resume_continues_like_the_uninterrupted_run(tmp_path, vl_data, family, extra):
    """3 steps straight vs 2 steps, a full checkpoint, and a resumed run for step 3: the same step-3
    metrics (the same batch: the loader's state was restored) and actor weights within 1e-6 (full
    fine-tuning of Qwen; LoRA adapters of LLaVA)."""
    extra = {"training.total_steps": 3, "checkpoint.save_full_every": 2, "training.micro_batch_size": 2, **extra}
    straight = create_trainer(_config(tmp_path / "a", family, vl_data, **extra))
    straight.train()
    ckpt = os.path.join(straight.config.checkpoint.save_dir, "checkpoints", "step_000002")
    resumed = create_trainer(_config(tmp_path / "b", family, vl_data, **{**extra, "checkpoint.resume": ckpt}))
    assert resumed.global_step == 2
    resumed.train()
    want = dict(straight.actor.model.named_parameters())
    for name, p in resumed.actor.model.named_parameters():
        assert torch.allclose(p, want[name], atol=1e-6, rtol=0), name

    def step3(trainer):
        rows = [json.loads(x) for x in open(os.path.join(trainer.config.checkpoint.save_dir, "metrics.jsonl"))]
        return next(r for r in rows if r["step"] == 3)

    a, b = step3(straight), step3(resumed)
    for k in ("reward/mean", "actor/pg_loss", "response_length/mean"):
        if k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-7), k
    assert straight.run.last_batch.prompt_text == resumed.run.last_batch.prompt_text


# ------------------------------------------------------------------ masks and refusals


def test_placeholder_tokens_are_masked_out_of_the_response(tmp_path, vl_data):
    """A hand-made response [t, <|image_pad|>, t, <|vision_end|>] on a prompt with an image: response_mask
    [1, 0, 1, 0]; also on a text row of a dataset with images; a text-only batch (no multi_modal) keeps
    its mask (no images, no rule)."""
    _, tok, cfg = _actor(tmp_path, "qwen2_5_vl", vl_data)
    t = tok("The", add_special_tokens=False)["input_ids"][0]
    pad, end = tok.convert_tokens_to_ids("<|image_pad|>"), tok.convert_tokens_to_ids("<|vision_end|>")
    batch = _batch(tok, cfg, [[t, pad, t, end]], rows=(0,))
    assert batch.response_mask[0].tolist() == [1.0, 0.0, 1.0, 0.0]
    text_only = _batch(tok, cfg, [[t, pad, t, end]], rows=(5,))  # a text row of image data: still masked
    assert text_only.multi_modal == [None] and text_only.response_mask[0].tolist() == [1.0, 0.0, 1.0, 0.0]
    plain = assemble_rollout(text_only.select([0]).replace(multi_modal=[], input_ids=text_only.input_ids[:, :-4],
                                                             attention_mask=text_only.attention_mask[:, :-4],
                                                             responses=None, response_mask=None, position_ids=None),
                             [[t, pad, t, end]], None, tok, 8)
    assert plain.response_mask[0].tolist() == [1.0, 1.0, 1.0, 1.0]
    # the actor's forward takes such a response (its trunk sees a pad where the placeholder was: the model
    # would otherwise look for a 5th image feature), with finite log-probs
    actor, _, _ = _actor(tmp_path / "actor", "qwen2_5_vl", vl_data)
    logp, _ = actor.compute_log_probs(batch)
    assert torch.isfinite(logp).all()


@pytest.mark.parametrize("extra,key", [
    ({"algorithm.name": "ppo"}, "algorithm.adv_estimator"),
    ({"training.use_packed_samples": "true"}, "training.use_packed_samples"),
    ({"async_training.partial_rollout": "true", "async_training.enable": "true",
      "rollout.hf_weight_copy": "true"}, "async_training.partial_rollout"),
])
def test_refusals_name_the_key(tmp_path, vl_data, extra, key):
    try:
        cfg = _config(tmp_path, "qwen2_5_vl", vl_data, **extra)
    except ConfigError as exc:  # refused by another rule first: still one line naming a key
        pytest.skip(f"the config itself refuses these settings: {exc}")
    with pytest.raises(ConfigError) as err:
        check_vision_language(cfg)
    message = str(err.value)
    assert message.startswith(f"{key}:") and "vision-language" in message and "\n" not in message


def test_sglang_is_refused_for_a_vl_model(tmp_path, vl_data):
    """The SGLang refusal on its own (the CPU config check refuses sglang without a GPU first)."""
    cfg = _config(tmp_path, "qwen2_5_vl", vl_data)
    cfg.rollout.name = "sglang"
    with pytest.raises(ConfigError, match=r"^rollout.name: sglang does not run vision-language models in verl; use "
                                          r"rollout.name: vllm or rollout.name: hf \(model.name .* is a vision-language"):
        check_vision_language(cfg)


def test_freeze_vision_tower_on_a_text_model_is_refused(tmp_path, tiny_qwen2):
    over = {"model.name": "tiny:qwen2", "model.freeze_vision_tower": "true"}
    cfg = load_config(None, small_overrides(tmp_path, **over))
    with pytest.raises(ConfigError, match=r"^model.freeze_vision_tower: true, but model.name 'tiny:qwen2' has no"):
        check_vision_language(cfg)


def test_ray_backend_is_refused(tmp_path, vl_data):
    cfg = _config(tmp_path, "qwen2_5_vl", vl_data)
    cfg.distributed.backend = "ray"  # set after loading: the check itself, whatever else Ray needs
    with pytest.raises(ConfigError, match=r"^distributed.backend: ray: .*vision-language"):
        check_vision_language(cfg)


def test_split_markers_for_the_fixture_rows(vl_data):
    """The fixture's two-image row renders two image parts (sanity of the data the tests above use)."""
    rows = [json.loads(x) for x in open(vl_data)]
    parts = split_image_markers(rows[3]["prompt"], 2, "row 3")[0]["content"]
    assert [p["type"] for p in parts] == ["image", "text", "image", "text"]


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava"])
def test_packing_a_vl_model_pads_by_default_and_refuses_when_asked(family):
    """Packing chosen only as the GPU default: padded micro-batches (one log line); asked for: the error."""
    from transformers import AutoModelForImageTextToText

    from verl.models.tiny_vl import tiny_vl_model_path
    from verl.workers.micro_batches import MicroBatching
    from verl.workers.packing import PackingUnsupported, causal_lm_trunk

    trunk = causal_lm_trunk(AutoModelForImageTextToText.from_pretrained(tiny_vl_model_path(family)))
    mode, micro = MicroBatching(4, packed=True, packed_by_default=True).with_packing(trunk, "actor")
    assert mode is None and micro.packed is False
    with pytest.raises(PackingUnsupported, match=r"^training.use_packed_samples: a vision-language model"):
        MicroBatching(4, packed=True).with_packing(trunk, "actor")
