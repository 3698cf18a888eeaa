"""Validation: per-data-source accuracy of greedy answers, mean@n/pass@n, baseline prompt."""

import json


from conftest import small_overrides
from verl import create_trainer, load_config

REWARD = '''
def even_length(prompts, responses, samples):
    # 1.0 when the answer has an even number of characters: a deterministic rule the test can recompute
    return [1.0 if len(r) % 2 == 0 else 0.0 for r in responses]
'''


def test_validation_metrics_match_independent_greedy(tmp_path, tiny_qwen2):
    rows = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b), "data_source": src}
            for src, pairs in (("easy", [(1, 2), (3, 4), (2, 2)]), ("hard", [(17, 25), (40, 2)]))
            for a, b in pairs]
    val = tmp_path / "val.jsonl"
    val.write_text("\n".join(json.dumps(r) for r in rows))
    fn = tmp_path / "rew.py"
    fn.write_text(REWARD)
    cfg = load_config(None, small_overrides(
        tmp_path, **{"model.name": "tiny:qwen2", "algorithm.name": "grpo", "rollout.n": 2, "training.total_steps": 1,
                     "training.val_every": 1, "data.val_files": f"[{val}]", "data.val_n": 3,
                     "reward_fn.type": "python", "reward_fn.function": f"{fn}:even_length"}))
    trainer = create_trainer(cfg)

    # Independent expectation: greedy answers, one prompt at a time, with the untrained model.
    # Another computation path than the validator's left-padded batch (float32: logits ~1e-6
    # apart); exact agreement is expected because at these 40 greedy steps the two best logits
    # are >= 0.05 apart (measured), a margin no float32 rounding difference closes.
    model, tok = trainer.actor.model, trainer.tokenizer
    expected = {"easy": [], "hard": []}
    for row, text in zip(trainer.val_rows, trainer.validator.loader.texts):
        ids = tok(text, return_tensors="pt", add_special_tokens=False)
        out = model.generate(**ids, do_sample=False, max_new_tokens=cfg.rollout.max_new_tokens,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        answer = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
        expected[row.data_source].append(1.0 if len(answer) % 2 == 0 else 0.0)

    trainer.step()
    logged = [json.loads(line) for line in open(tmp_path / "out" / "metrics.jsonl")]
    step0 = next(r for r in logged if r["step"] == 0)
    for src, values in expected.items():
        assert abs(step0[f"val/{src}/acc@1"] - sum(values) / len(values)) < 1e-6, src
        assert abs(step0[f"val/{src}/mean@1"] - sum(values) / len(values)) < 1e-6, src
    all_values = expected["easy"] + expected["hard"]
    assert abs(step0["val/all/acc@1"] - sum(all_values) / 5) < 1e-6
    # mean@3 is a mean of 0/1 scores; pass@3 >= mean@3 always
    assert 0.0 <= step0["val/all/mean@3"] <= step0["val/all/pass@3"] <= 1.0
    step1 = next(r for r in logged if r["step"] == 1)
    assert "val/all/acc@1" in step1  # after training too (val_every=1, and always at the last step)

    texts = [json.loads(line) for line in open(tmp_path / "out" / "text.jsonl")]
    keys = [t["key"] for t in texts]
    assert "baseline/before" in keys and "baseline/after" in keys
    samples = [json.loads(line) for line in open(tmp_path / "out" / "samples.jsonl")]
    assert any(s.get("kind") == "val" for s in samples)


def test_plot_and_report_from_a_real_short_run(tmp_path, tiny_gpt2):
    """`verl plot` / `verl report` on the run directory a real (short) training run wrote."""
    from PIL import Image

    from verl.cli import main

    run = tmp_path / "out"
    cfg = load_config(None, small_overrides(tmp_path, **{"training.total_steps": 3,
                                                         "logging.backends": "[jsonl, tensorboard]"}))
    create_trainer(cfg).train()
    png = tmp_path / "dash.png"
    assert main(["plot", str(run), "--out", str(png)]) == 0
    assert Image.open(png).size == (1400, 900)  # default size=(14, 9) inches at dpi 100
    html = tmp_path / "report.html"
    assert main(["report", str(run), "--out", str(html)]) == 0
    page = html.read_text()
    assert "data:image/png;base64," in page and "reward" in page
