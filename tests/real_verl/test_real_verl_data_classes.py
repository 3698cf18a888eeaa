"""Real verl's user data classes through main_ppo: data.custom_cls (a dataset class, verl/data/custom_dataset.py)
and data.sampler (a sampler, verl/data/custom_sampler.py), written against real verl's interfaces
(verl.utils.dataset.rl_dataset.RLHFDataset, verl.experimental.dataset.sampler)."""

import json

import pytest

from verl.compat.translate import load_translated, translate
from verl.config import DataConfig, build_section
from verl.trainer.main_ppo import main

# A class as real verl's recipes write them (retool's CustomRLHFDataset): it reads the files through the base
# class, then maps each AIME-layout row (ID, Problem, Answer) into real verl's row layout.
AIME_CLASS = '''
from verl.utils.dataset.rl_dataset import RLHFDataset

SUFFIX = " Put the answer after 'Answer:'."


class AimeDataset(RLHFDataset):
    def _read_files_and_tokenize(self):
        super()._read_files_and_tokenize()
        assert self.prompt_key == "prompt" and self.config.custom_cls.path.endswith("aime_ds.py")
        self.dataframe = self.dataframe.map(self.map_fn, remove_columns=self.dataframe.column_names)
        self.dataframe = self.dataframe.filter(lambda row: row["reward_model"]["ground_truth"] != "4")

    def map_fn(self, row):
        return {"data_source": "aime_2024", "prompt": [{"role": "user", "content": row["Problem"] + SUFFIX}],
                "reward_model": {"ground_truth": str(row["Answer"])}, "extra_info": {"id": row["ID"]}}


class SystemFirst(AimeDataset):
    """Overrides __getitem__: a system message first, the user's text as structured content parts."""

    def __getitem__(self, item):
        row = super().__getitem__(item)
        text = row["raw_prompt"][0]["content"]
        row["raw_prompt"] = [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": [{"type": "text", "text": "Q: "},
                                                          {"type": "text", "text": text}]}]
        row["data_source"] = "mine"
        return row


class TokensOnly(AimeDataset):
    """An older class's rows: its own input_ids, the prompt popped, no raw_prompt."""

    def __getitem__(self, item):
        row = dict(self.dataframe[item])
        row.pop(self.prompt_key)
        row["input_ids"] = [1, 2, 3]
        return row


class NeedsKey(RLHFDataset):
    def __init__(self, data_files, tokenizer, config, processor=None, max_samples=-1):
        self.depth = config.curriculum_depth
        super().__init__(data_files, tokenizer, config, processor, max_samples)


class NotADataset:
    pass
'''


def _aime(path, n=4):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"ID": f"p{i}", "Problem": f"What is {i} + 1?", "Answer": i + 1}
                                         for i in range(n)]), str(path))
    return str(path)


@pytest.fixture
def aime(tmp_path):
    (tmp_path / "aime_ds.py").write_text(AIME_CLASS)
    return _aime(tmp_path / "aime.parquet"), str(tmp_path / "aime_ds.py")


def _line(data, name, extra=()):
    train, code = data
    return [f"data.train_files={train}", "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "data.max_prompt_length=64", "data.max_response_length=4",
            "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", "trainer.logger=['console']",
            "trainer.device=cpu", f"data.custom_cls.path={code}", f"data.custom_cls.name={name}", *extra]


def test_dataset_class_rows_are_the_samples(aime, tiny_gpt2):
    """The class's rows, by hand: rows 0, 1, 2 (row 3's answer 4 is filtered by the class), mapped by map_fn."""
    from verl.data.custom_dataset import dataset_rows
    from verl.models.loading import load_tokenizer

    train, code = aime
    cfg = build_section(DataConfig, {"dataset_class": f"{code}:AimeDataset", "train_files": [train]}, "data")
    rows = dataset_rows(cfg, [train], load_tokenizer(tiny_gpt2))
    suffix = " Put the answer after 'Answer:'."
    assert [(r.prompt, r.ground_truth, r.data_source, r.extra) for r in rows] == [
        ([{"role": "user", "content": f"What is {i} + 1?{suffix}"}], str(i + 1), "aime_2024", {"id": f"p{i}"})
        for i in (0, 1, 2)]
    # __getitem__ overridden: raw_prompt wins over the prompt column; structured text parts are joined
    cfg = build_section(DataConfig, {"dataset_class": f"{code}:SystemFirst", "train_files": [train]}, "data")
    first = dataset_rows(cfg, [train], load_tokenizer(tiny_gpt2))[0]
    assert first.prompt == [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": f"Q: What is 0 + 1?{suffix}"}]
    assert (first.data_source, first.ground_truth, first.extra, first.images) == ("mine", "1", {"id": "p0"}, None)


def test_structured_image_parts_become_markers():
    from verl.data.custom_dataset import flatten_content

    messages, images = flatten_content([{"role": "user", "content": [
        {"type": "image", "image": "a.png"}, {"type": "text", "text": "Find x."}]}])
    assert messages == [{"role": "user", "content": "<image>Find x."}] and images == ["a.png"]


def test_custom_cls_translates_counts_steps_and_picks_the_reward(aime):
    cfg = load_translated(translate(_line(aime, "AimeDataset", ["trainer.total_epochs=2"])))
    assert cfg.data.dataset_class == f"{aime[1]}:AimeDataset"
    assert cfg.training.total_steps == 2  # 3 rows of the class // 2 per step x 2 epochs (the file has 4)
    assert cfg.reward_fn.type == "math_dapo"  # the class's data_source aime_2024, real verl's rule


def test_custom_cls_trains_on_the_class_rows(aime, tmp_path):
    out = tmp_path / "out"
    assert main(_line(aime, "AimeDataset", ["trainer.total_training_steps=1", f"trainer.default_local_dir={out}",
                                            "+logging.progress_bar=false"])) == 0
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert samples and all("Put the answer after 'Answer:'." in s["prompt"] for s in samples), samples[:1]


@pytest.mark.parametrize("name, extra, named", [
    ("AimeDataset", ["data.custom_cls.name=null"], "data.custom_cls.name: required with data.custom_cls.path="),
    ("Missing", [], "has no class 'Missing' (classes defined there: AimeDataset, NeedsKey, NotADataset, "
                    "SystemFirst, TokensOnly)"),
    ("NotADataset", [], "NotADataset from"),
    ("TokensOnly", [], "TokensOnly's rows have no prompt messages (raw_prompt or 'prompt'"),
    ("NeedsKey", [], "real verl's data config as given here has no key 'curriculum_depth'"),
])
def test_custom_cls_refusals_are_one_line_naming_the_key(aime, tmp_path, capsys, name, extra, named):
    rc = main(_line(aime, name, [f"trainer.default_local_dir={tmp_path / 'out'}", *extra]))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: data.custom_cls") and named in err[0], err[0]
    assert "input_ids" in err[0] if name == "TokensOnly" else True
