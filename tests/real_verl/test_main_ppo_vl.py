"""Real verl's vision-language keys and its geo3k reward through our main_ppo
(verl/compat/real_verl_vision.py, verl/rewards/geo3k.py, the VL scripts of tools/real_verl_scripts/harness.py)."""

import json
import os

import pytest
from real_verl_runner import require_real_verl, run_real_verl

from tools.real_verl_scripts import harness as es
from verl.compat.translate import load_translated, translate
from verl.rewards.geo3k import answers_equal, geo3k_score, is_formatted, last_boxed
from verl.trainer.main_ppo import main

VL = "tiny:qwen2_5_vl"


@pytest.fixture(scope="module")
def geo3k(tmp_path_factory):
    """Two rows in real verl's geo3k layout (images as {bytes, path}, '<image>' in the prompt)."""
    return es.write_rows(str(tmp_path_factory.mktemp("geo3k") / "train.parquet"), "geo3k")


def _base(train, *extra):
    return [f"data.train_files={train}", f"actor_rollout_ref.model.path={VL}", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "data.max_prompt_length=256", "data.max_response_length=4", "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.rollout.n=2", "trainer.total_training_steps=1", "trainer.logger=['console']",
            "trainer.device=cpu", *extra]


def _refused(capsys, argv) -> str:
    """main_ppo's one-line refusal (exit 2) for argv."""
    assert main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


# ---------------------------------------------------------------------------- the fixture


def test_geo3k_rows_have_real_verls_layout(geo3k):
    import io

    import pyarrow.parquet as pq
    from PIL import Image

    rows = pq.read_table(geo3k).to_pylist()
    assert len(rows) == 2 and {r["data_source"] for r in rows} == {"hiyouga/geometry3k"}
    content = rows[0]["prompt"][0]["content"]
    assert content.startswith("<image>Find x.") and content.endswith(r"MUST BE put in \boxed{}.")
    image = rows[0]["images"][0]
    assert image["path"] is None and Image.open(io.BytesIO(image["bytes"])).size == (56, 56)
    assert rows[0]["reward_model"] == {"style": "rule", "ground_truth": "3"}
    assert rows[0]["images"][0]["bytes"] != rows[1]["images"][0]["bytes"]  # one picture per row


# ---------------------------------------------------------------------------- key mapping


def test_vision_keys_map(geo3k):
    tr = translate(_base(geo3k, "data.image_key=images", "data.mm_processor_kwargs.min_pixels=784",
                         "+data.mm_processor_kwargs.max_pixels=3136",
                         "actor_rollout_ref.actor.freeze_vision_tower=True",
                         "actor_rollout_ref.rollout.limit_images=2"))
    v = tr.values
    assert (v["data.image_key"], v["data.min_pixels"], v["data.max_pixels"]) == ("images", 784, 3136)
    assert v["model.freeze_vision_tower"] is True and v["rollout.limit_images"] == 2
    assert v["reward_fn.type"] == "geo3k"  # hiyouga/geometry3k's scorer, as real verl's default_compute_score
    assert tr.sources["data.min_pixels"] == "data.mm_processor_kwargs={\"min_pixels\": 784, \"max_pixels\": 3136}"
    cfg = load_translated(tr)
    assert (cfg.data.min_pixels, cfg.data.max_pixels, cfg.model.freeze_vision_tower) == (784, 3136, True)


def test_mm_processor_kwargs_as_one_mapping(geo3k):
    v = translate(_base(geo3k, "data.mm_processor_kwargs={min_pixels: 1568, max_pixels: 6272}")).values
    assert (v["data.min_pixels"], v["data.max_pixels"]) == (1568, 6272)


def test_defaults_set_nothing_new(geo3k):
    """Not given: image_key is real verl's default 'images' (ours too); the rest keep our defaults."""
    v = translate(_base(geo3k)).values
    assert v["data.image_key"] == "images"
    assert not {"data.min_pixels", "data.max_pixels", "model.freeze_vision_tower", "rollout.limit_images"} & set(v)


@pytest.mark.parametrize("arg, why", [
    ("data.image_patch_size=16", "the model's processor with its own patch size"),
    ("data.return_multi_modal_inputs=False", "used nowhere there"),
    ("actor_rollout_ref.model.lora.freeze_vision_model=False", "Megatron LoRA only"),
    ("actor_rollout_ref.model.lora.freeze_vision_projection=False", "Megatron LoRA only"),
    ("+actor_rollout_ref.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache=True", "speed and memory only"),
])
def test_vision_keys_accepted_and_logged(arg, why, geo3k):
    notes = translate(_base(geo3k, arg)).notes
    key = arg.lstrip("+").split("=")[0]
    assert any(n.startswith(f"ignored {key}=") and why in n for n in notes), notes


def test_video_and_audio_keys_pass_without_such_columns(geo3k):
    tr = translate(_base(geo3k, "data.video_key=videos", "data.audio_key=audios"))
    assert "data.video_key" not in json.dumps(tr.values)


# ---------------------------------------------------------------------------- refusals


def test_videos_in_the_data_are_refused(capsys, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [dict(es.geo3k_row(i), videos=[{"bytes": b"\x00", "path": None}]) for i in range(2)]
    path = str(tmp_path / "video.parquet")
    pq.write_table(pa.Table.from_pylist(rows), path)
    line = _refused(capsys, _base(path, "data.video_key=videos"))
    assert line.startswith("error: real verl's data.video_key=videos is not supported: ") and "only images" in line
    line = _refused(capsys, _base(path))  # real verl's default video_key reads the column just the same
    assert "data.video_key=videos is not supported" in line


@pytest.mark.parametrize("arg, names", [
    ("data.mm_processor_kwargs.fps=2", "real verl's data.mm_processor_kwargs.fps=2 is not supported"),
    ("data.mm_processor_kwargs.min_pixels=0", "data.mm_processor_kwargs.min_pixels: must be >= 1"),
    ("data.mm_processor_kwargs=7", "data.mm_processor_kwargs=7: expected a mapping"),
    ("actor_rollout_ref.actor.freeze_vision_tower=maybe", "actor_rollout_ref.actor.freeze_vision_tower: expected True"),
    ("actor_rollout_ref.rollout.limit_images=0",
     "must be >= 1, got 0 [rollout.limit_images <- actor_rollout_ref.rollout.limit_images=0]"),
    ("data.mm_processor_kwargs={min_pixels: 6272, max_pixels: 784}", "data.min_pixels (6272) is more than"),
])
def test_bad_vision_values_are_one_line(arg, names, capsys, geo3k):
    assert names in _refused(capsys, _base(geo3k, arg))


# ---------------------------------------------------------------------------- the geo3k reward

T = "<think>the two sides are equal</think> "


@pytest.mark.parametrize("response, truth, score", [
    # 0.9 x correct + 0.1 x formatted (<think>...</think> then a \boxed{}), by hand:
    (T + r"so x = \boxed{3}", "3", 1.0),  # right and formatted: 0.9 + 0.1
    (r"x = \boxed{3}", "3", 0.9),  # right, no <think>: 0.9
    (T + r"\boxed{4}", "3", 0.1),  # wrong, formatted: 0.1
    ("the answer is 3", "3", 0.0),  # no box: nothing to grade, and not formatted
    (T + "the answer is 3", "3", 0.0),  # <think> but no box: the format needs both
    ("intro " + T + r"\boxed{3}", "3", 0.9),  # text before <think>: not the format (it must start the response)
    (T + r"\boxed{2} no, \boxed{3}", "3", 1.0),  # the last box counts
    (T + r"\boxed{3", "3", 0.0),  # an unclosed box: no answer, and the format needs a closing brace
    (T + r"\boxed{ 3.0 }", "3", 1.0),  # stripped; 3.0 is the integer 3
])
def test_geo3k_score_by_hand(response, truth, score):
    assert geo3k_score(response, truth) == pytest.approx(score)


@pytest.mark.parametrize("given, truth, equal", [
    (r"2\sqrt 3", r"2\sqrt{3}", True),  # MATH normalization: \sqrt3 -> \sqrt{3}
    (r"\sqrt{12}", r"2\sqrt{3}", True),  # sympy: sqrt(12) - 2 sqrt(3) = 0
    ("40/3", r"\frac{40}{3}", True),  # 'a/b' -> \frac{a}{b}
    ("13.33", r"\frac{40}{3}", False),  # 40/3 = 13.333...: a rounded decimal is not the fraction
    (r"\frac{6}{2}", "3", False),  # an integer truth needs an integer answer (no simplification)
    (r"\frac{6}{4}", r"\frac{3}{2}", False),  # unreduced fractions are not accepted
    ("1.5", r"\frac{3}{2}", True),  # sympy: 3/2 - 1.5 = 0
    ("x = 3", "3", True),  # a short left side is dropped
    ("AB=6", "6", True),  # 'AB' (2 characters) too
    ("AB = 6", "6", False),  # 'AB ' is 3 characters with its space: kept, and 'AB=6' is not 6
    (r"45^\circ", "45", True),  # degrees
    ("5 cm", "5", True),  # units
    (r"12 \pi", r"12\pi", True),  # spaces
    (r"\pi r^2", r"r^2\pi", False),  # 'pi' and 'r': 3 letters, more than sympy is asked to simplify
    (r"4\sqrt{2}", r"\sqrt{32}", True),  # sympy: 4 sqrt(2) - sqrt(32) = 0
    ("6.28", r"2\pi", False),  # 2 pi = 6.2831...
    ("(1, 2)", "(1,2)", True),  # tuples element by element
    ("(1,2)", "[1,2]", False),  # other brackets
    (r"2\frac{1}{2}", r"\frac{5}{2}", True),  # a mixed number: 2 + 1/2
    (None, "3", False),  # no box
])
def test_geo3k_answer_equivalence_by_hand(given, truth, equal):
    assert answers_equal(given, truth) is equal


def test_geo3k_pieces():
    assert last_boxed(r"a \boxed{\frac{1}{2}} b") == r"\frac{1}{2}"  # nested braces kept
    assert last_boxed("no box") is None and last_boxed(r"\boxed{open") is None
    assert is_formatted("<think>a\nb</think>\n\\boxed{3}\n")  # newlines inside and around (DOTALL)
    assert not is_formatted(r"<think>a</think> 3")


def _oracle_cases():
    pairs = [("3", "3"), ("3.0", "3"), ("x = 3", "3"), (r"2\sqrt{3}", r"2\sqrt 3"), (r"\sqrt{12}", r"2\sqrt{3}"),
             ("40/3", r"\frac{40}{3}"), ("13.33", r"\frac{40}{3}"), (r"\frac{6}{2}", "3"), (r"45^\circ", "45"),
             (r"\frac{6}{4}", r"\frac{3}{2}"), ("1.5", r"\frac{3}{2}"), (r"2 \pi", r"2\pi"), ("6.28", r"2\pi"),
             ("5 cm", "5"), ("5", "5 cm"), (r"\frac{1}{2}", "0.5"), (".5", "0.5"), (r"4\sqrt{2}", r"\sqrt{32}"),
             (r"\dfrac{8}{3}", r"\frac{8}{3}"), ("8/3", "2.6667"), ("7", "7.00"), ("1,000", "1000"),
             ("(1, 2)", "(1,2)"), ("(1,2)", "[1,2]"), (r"\frac{\sqrt{3}}{2}", r"\frac{1}{2}\sqrt{3}"),
             (r"3\sqrt{3}", "5.196"), ("- 4", "-4"), ("4", "-4"), (r"\text{3}", "3"), ("30 degrees", "30"),
             (r"2\frac{1}{2}", r"\frac{5}{2}"), (r"\frac52", r"\frac{5}{2}"), (r"\theta", r"\theta"), ("", "3"),
             (r"\pi r^2", r"r^2\pi"), (r"\sqrt[3]{8}", "2"), (r"10\%", "10"), (r"\$5", "5"), ("x=y=3", "3"),
             ("AB = 6", "6"), ("ABC = 6", "6"), (r"\left(2\right)", "2"), (r"6\sqrt{3}+2", r"2+6\sqrt{3}"),
             (r"\frac{a+b}{2}", r"\frac{b+a}{2}"), ("60", r"60^{\circ}"), (r"\frac{20}{3}", "6.67")]
    responses = [T + r"so \boxed{" + g + "}" for g, _ in pairs] + [r"\boxed{" + g + "}" for g, _ in pairs]
    truths = [t for _, t in pairs] * 2
    for extra in ["<think>a</think>", "no box 3", r"<think>a</think>\boxed{3", r"pre <think>a</think> \boxed{3}",
                  "<think>x</think><think>y</think> \\boxed{3} done", "<think>a\nb</think>\n\\boxed{3}\n"]:
        responses.append(extra)
        truths.append("3")
    return [{"kind": "score", "data_source": "hiyouga/geometry3k", "response": r, "ground_truth": t}
            for r, t in zip(responses, truths)]


def test_geo3k_equals_real_verls_scorer(tmp_path):
    """Real verl 0.9.1's default_compute_score for hiyouga/geometry3k (its geo3k.py with mathruler
    0.1.0), run apart (tests/real_verl_oracle.py), gives our score on every case."""
    require_real_verl("mathruler")
    cases = _oracle_cases()
    real = [r["score"] for r in run_real_verl(cases, tmp_path)]
    ours = [geo3k_score(c["response"], c["ground_truth"]) for c in cases]
    differ = [(c["response"], c["ground_truth"], a, b) for c, a, b in zip(cases, ours, real) if a != pytest.approx(b)]
    assert not differ
    assert {0.0, 0.1, 0.9, 1.0} <= set(real)  # every branch of the score is exercised


def test_by_data_source_routes_geo3k():
    from verl.config import RewardFnConfig
    from verl.rewards.by_data_source import build_by_data_source, scorer_for

    assert scorer_for("hiyouga/geometry3k") == "geo3k"
    fn = build_by_data_source(RewardFnConfig(type="by_data_source"))
    samples = [{"data_source": "hiyouga/geometry3k", "ground_truth": "3"},
               {"data_source": "openai/gsm8k", "ground_truth": "3"}]
    assert fn(["p", "p"], [T + r"\boxed{3}", "#### 3"], samples) == [1.0, 1.0]


# ---------------------------------------------------------------------------- real verl's VL scripts


def test_vision_scripts_run_on_the_tiny_vl_model(tmp_path):
    import yaml

    from verl.models.tiny_vl import tiny_vl_model_path

    examples = es.load()
    vision = {s.name for s in examples.scripts if es.is_vision(s)}
    assert {"examples/grpo_trainer/run_qwen2_5_vl-7b.sh", "examples/grpo_trainer/run_qwen2_5_vl-7b_lora.sh",
            "examples/grpo_trainer/run_qwen2_5_vl-7b_freeze_vision.sh",
            "examples/grpo_trainer/run_glm41v_9b.sh"} <= vision
    assert "examples/grpo_trainer/run_qwen2-7b_math.sh" not in vision
    script = next(s for s in examples.scripts if s.name == "examples/grpo_trainer/run_qwen2_5_vl-7b.sh")
    model = tiny_vl_model_path("qwen2_5_vl")
    values = dict(a.split("=", 1) for a in es.tiny_args(script, str(tmp_path), "gpt2-folder", str(tmp_path), model))
    assert values["actor_rollout_ref.model.path"] == model and values["data.image_key"] == "images"
    assert yaml.safe_load(values["data.train_files"]).endswith("geo3k.parquet")
    assert values["data.max_prompt_length"] == es.VISION_SIZES["data.max_prompt_length"]


def _train_script(name: str, tmp_path, capsys) -> list[dict]:
    """Real verl's script `name` (its arguments from the mirror, sizes replaced) trained one step on
    tiny-qwen2_5_vl with HF generation on the CPU; the metrics of its step."""
    from verl.models.tiny import tiny_model_path
    from verl.models.tiny_vl import tiny_vl_model_path

    examples = es.load()
    script = next(s for s in examples.scripts if s.name == name)
    es.provide_files(examples, str(tmp_path / "real_verl"))
    args = es.tiny_args(script, str(tmp_path), tiny_model_path("gpt2"), str(tmp_path / "real_verl"),
                        tiny_vl_model_path("qwen2_5_vl"))
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 0, err[-3000:]
    assert "reward: geo3k" in err and "model.name=" in err
    with open(tmp_path / "out" / "metrics.jsonl") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_geo3k_script_trains_a_step_on_the_tiny_vl_model(tmp_path, capsys):
    rows = _train_script("examples/grpo_trainer/run_qwen2_5_vl-7b.sh", tmp_path, capsys)
    step = next(r for r in rows if r.get("step") == 1 and "actor/pg_loss" in r)
    assert "reward/hiyouga/geometry3k/mean" in step and step["training/global_step"] == 1
    with open(tmp_path / "out" / "samples.jsonl") as fh:
        samples = [json.loads(line) for line in fh if line.strip()]
    # the row's '<image>' marker became the model's image chunk (its pixels went with it)
    assert samples and all("<|vision_start|><|image_pad|><|vision_end|>Find x." in s["prompt"] for s in samples)


@pytest.mark.parametrize("name, want", [
    ("examples/grpo_trainer/run_qwen2_5_vl-7b_freeze_vision.sh", "model.freeze_vision_tower=true"),
    ("examples/grpo_trainer/run_qwen2_5_vl-7b_lora.sh", "model.lora.exclude_modules=\".*visual.*\""),
])
def test_freeze_vision_and_lora_scripts_train_a_step(name, want, tmp_path, capsys):
    from verl.compat.translate import translate as tr_

    examples = es.load()
    script = next(s for s in examples.scripts if s.name == name)
    (tmp_path / "t").mkdir()
    args = es.tiny_args(script, str(tmp_path / "t"), "gpt2", str(tmp_path), "tiny:qwen2_5_vl")
    assert want in tr_(args).overrides
    rows = _train_script(name, tmp_path, capsys)
    assert any(r.get("step") == 1 and "actor/pg_loss" in r for r in rows)


VARYING_REWARD = '''def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Differs between the two samples of a prompt (their texts differ), so advantages are not all 0."""
    return (sum(map(ord, solution_str)) % 97) / 97.0
'''


@pytest.mark.parametrize("name, vision_trained", [
    ("examples/grpo_trainer/run_qwen2_5_vl-7b.sh", True),
    ("examples/grpo_trainer/run_qwen2_5_vl-7b_freeze_vision.sh", False),
])
def test_a_real_step_trains_the_vision_tower_unless_frozen(name, vision_trained, tmp_path, capsys):
    """With a reward that varies, one step of real verl's geo3k script changes the language model and
    (its pixels reach the forward) the vision tower; the freeze_vision script's tower stays as it was."""
    from safetensors.torch import load_file

    from verl.models.tiny import tiny_model_path
    from verl.models.tiny_vl import tiny_vl_model_path

    reward = tmp_path / "varying.py"
    reward.write_text(VARYING_REWARD)
    examples = es.load()
    script = next(s for s in examples.scripts if s.name == name)
    model = tiny_vl_model_path("qwen2_5_vl")
    args = es.tiny_args(script, str(tmp_path), tiny_model_path("gpt2"), str(tmp_path), model)
    args += [f"custom_reward_function.path={reward}", "actor_rollout_ref.actor.optim.lr=1e-2",
             "actor_rollout_ref.actor.use_kl_loss=False"]
    assert main(args) == 0, capsys.readouterr().err[-3000:]
    before = load_file(os.path.join(model, "model.safetensors"))
    after = load_file(str(tmp_path / "out" / "model.safetensors"))
    changed = {k for k in before if not (before[k] == after[k]).all()}
    assert any(k.startswith("model.layers.") for k in changed)
    assert any(k.startswith("visual.") for k in changed) is vision_trained, sorted(changed)
