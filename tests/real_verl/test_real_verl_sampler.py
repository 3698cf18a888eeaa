"""Real verl's data.sampler.class_path / class_name: a user's sampler orders the training prompts, a curriculum
sampler's update(batch) runs after each step, and a resumed run continues the same order
(verl/data/custom_sampler.py, verl.experimental.dataset.sampler)."""

import json

import pytest
import torch

from tools.real_verl_scripts.stand_ins import CURRICULUM_SAMPLER
from verl.compat.translate import load_translated, translate
from verl.config import DataConfig, build_section
from verl.data.custom_sampler import SamplerOrder
from verl.data.prompts import PromptLoader
from verl.data.sources import DataError, PromptRow
from verl.trainer.main_ppo import main

# Real verl's test sampler (RandomCurriculumSampler: torch's RandomSampler on the global generator, no state), then
# samplers of our own
SAMPLERS = CURRICULUM_SAMPLER + '''
import json, os

from verl.experimental.dataset.sampler import AbstractCurriculumSampler, AbstractSampler


class Reversed(AbstractCurriculumSampler):
    """Rows last to first; update() logs the rows of each step (to $SAMPLER_LOG when set)."""

    def __init__(self, data_source, data_config):
        self.n, self.seen = len(data_source), []
        assert data_config.dataloader_num_workers == 0 and data_source[0]["reward_model"]["ground_truth"] in ("0", "2")

    def __iter__(self):
        return iter(range(self.n - 1, -1, -1))

    def __len__(self):
        return self.n

    def update(self, batch):
        rows = [int(i) for i in batch.non_tensor_batch["index"]]
        self.seen.append((rows, tuple(batch.batch["token_level_scores"].shape), len(batch)))
        if os.environ.get("SAMPLER_LOG"):
            with open(os.environ["SAMPLER_LOG"], "a") as fh:
                fh.write(json.dumps(rows) + "\\n")


class LoggedRandom(RandomCurriculumSampler):
    """Real verl's test sampler, its update() logging each step's rows to $SAMPLER_LOG."""

    def update(self, batch):
        with open(os.environ["SAMPLER_LOG"], "a") as fh:
            fh.write(json.dumps([int(i) for i in batch.non_tensor_batch["index"]][::2]) + "\\n")


class LowestScoreFirst(AbstractCurriculumSampler):
    """A curriculum: each next row is the one with the lowest score so far (update() adds the step's scores);
    its state says where the epoch stands."""

    def __init__(self, data_source, data_config):
        self.n, self.score, self.done = len(data_source), [0.0] * len(data_source), []

    def __iter__(self):
        while len(self.done) < self.n:
            i = min((j for j in range(self.n) if j not in self.done), key=lambda j: (self.score[j], j))
            self.done.append(i)
            yield i
        self.done = []

    def __len__(self):
        return self.n

    def update(self, batch):
        for i, s in zip(batch.non_tensor_batch["index"], batch.batch["token_level_scores"].sum(-1).tolist()):
            self.score[int(i)] += s

    def state_dict(self):
        return {"score": list(self.score), "done": list(self.done)}

    def load_state_dict(self, state):
        self.score, self.done = list(state["score"]), list(state["done"])


class OutOfRange(AbstractSampler):
    def __init__(self, data_source, data_config):
        self.n = len(data_source)

    def __iter__(self):
        return iter([self.n])

    def __len__(self):
        return 1


class NotASampler:
    def __init__(self, data_source, data_config):
        pass
'''


class _Tok:
    """A tokenizer stand-in: one id per character (the loader only encodes and pads)."""
    pad_token_id, eos_token_id, chat_template = 0, 0, None

    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [[ord(c) % 50 + 1 for c in t] for t in texts]}


@pytest.fixture
def samplers(tmp_path):
    path = tmp_path / "samplers.py"
    path.write_text(SAMPLERS)
    return str(path)


def _loader(samplers, name, n=5, batch=2, seed=3):
    rows = [PromptRow(prompt=f"q{i}", ground_truth=str(i), data_source="d", extra={"index": i}) for i in range(n)]
    cfg = build_section(DataConfig, {"sampler_class": f"{samplers}:{name}", "truncation": "error"}, "data")
    loader = PromptLoader(rows, _Tok(), cfg, batch_size=batch, seed=seed)
    loader.use_sampler(SamplerOrder.build(cfg, loader.rows, seed))
    return loader


def _step(loader, step):
    """One fake training step on the next batch: 2 samples per prompt, score (row * 7) % 5 each."""
    batch = loader.next_batch().repeat(2)
    rows = [int(p[1:]) for p in batch.prompt_text]
    batch.token_level_scores = torch.tensor([[0.0, float(r * 7 % 5)] for r in rows])
    loader.after_step(batch, step)
    return rows[::2]


def test_sampler_order_crosses_epochs_and_update_sees_each_step(samplers):
    loader = _loader(samplers, "Reversed")
    assert [_step(loader, s) for s in (1, 2, 3)] == [[4, 3], [2, 1], [0, 4]]  # epoch 2 starts inside step 3
    assert loader.order.sampler.seen == [([4, 4, 3, 3], (4, 2), 4), ([2, 2, 1, 1], (4, 2), 4),
                                         ([0, 0, 4, 4], (4, 2), 4)]  # update(batch): each sample's row, in order


def _resumed(samplers, name, before, after):
    """Rows of steps before+1..before+after, drawn by an uninterrupted loader and by one restored from the
    JSON state (trainer_state.json) taken after `before` steps."""
    whole = _loader(samplers, name)
    full = [_step(whole, s) for s in range(1, before + after + 1)]
    first = _loader(samplers, name)
    for s in range(1, before + 1):
        _step(first, s)
    state = json.loads(json.dumps(first.state_dict()))
    again = _loader(samplers, name)
    again.load_state_dict(state)
    return full[before:], [_step(again, s) for s in range(before + 1, before + after + 1)]


@pytest.mark.parametrize("name", ["RandomCurriculumSampler", "LowestScoreFirst"])
def test_resume_continues_the_same_order(samplers, name):
    expected, resumed = _resumed(samplers, name, before=3, after=4)  # the save falls inside an epoch
    assert resumed == expected
    if name == "LowestScoreFirst":  # the curriculum's order is its updates': not the rows' order
        assert expected != [[0, 1], [2, 3], [4, 0], [1, 2]]


def test_random_sampler_order_follows_the_seed_and_leaves_the_run_generator(samplers):
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a = [_step(_loader(samplers, "RandomCurriculumSampler", seed=3), 1) for _ in range(2)]
    assert a[0] == a[1] and torch.equal(torch.get_rng_state(), before)
    orders = {tuple(sum((_step(loader, s) for s in (1, 2)), [])) for loader in
              (_loader(samplers, "RandomCurriculumSampler", seed=k) for k in range(6))}
    assert len(orders) > 1  # another seed, another order


def test_bad_samplers_are_one_line(samplers):
    loader = _loader(samplers, "OutOfRange")
    with pytest.raises(DataError, match=r"^data\.sampler_class: the sampler yielded index 5; the training data has "
                                        r"5 rows \(0\.\.4\)$"):
        loader.next_batch()


def _line(train, samplers, name, extra=()):
    return [f"data.train_files={train}", "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "data.max_prompt_length=64", "data.max_response_length=4",
            "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", "trainer.logger=['console']",
            "trainer.device=cpu", "data.dataloader_num_workers=0", f"data.sampler.class_path={samplers}",
            f"data.sampler.class_name={name}", *extra]


def test_curriculum_sampler_trains_with_update_after_each_step(samplers, tmp_path, monkeypatch):
    from tools.real_verl_scripts.harness import write_rows

    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k", n=3)  # ground truths "2", "3", "4"
    monkeypatch.setenv("SAMPLER_LOG", str(tmp_path / "log.jsonl"))
    out = tmp_path / "out"
    assert main(_line(train, samplers, "Reversed", ["trainer.total_training_steps=2", f"trainer.default_local_dir={out}",
                                                    "+logging.progress_bar=false"])) == 0
    assert [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()] == [[2, 2, 1, 1],
                                                                                               [0, 0, 2, 2]]
    prompts = [json.loads(line)["prompt"] for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [p.split(" ")[2] for p in prompts[:4]] == ["2", "2", "1", "1"]  # step 1: rows 2 and 1, the sampler's


def test_sampler_keys_translate(samplers, tmp_path):
    from tools.real_verl_scripts.harness import write_rows

    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    cfg = load_translated(translate(_line(train, samplers, "Reversed")))
    assert cfg.data.sampler_class == f"{samplers}:Reversed"


@pytest.mark.parametrize("extra, named", [
    (["data.sampler.class_name=NotASampler"], "data.sampler.class_path: NotASampler from '{samplers}' is not a "
                                              "subclass of verl.experimental.dataset.sampler.AbstractSampler"),
    (["data.sampler.class_name=null"], "data.sampler.class_name: required with data.sampler.class_path={samplers}"),
    (["data.sampler.class_path=pkg://json", "data.sampler.class_name=JSONDecoder"],
     "data.sampler.class_path: JSONDecoder from 'json' is not a subclass"),  # pkg:// imports a module
    (["data.sampler.class_path=pkg://tests.utils.dataset.test_create_rl_sampler_on_cpu"],  # real verl's tests/
     "data.sampler.class_path: cannot import module 'tests.utils.dataset.test_create_rl_sampler_on_cpu'"),
    (["+async_training.enable=true"], "data.sampler_class: a sampler orders the prompts of each step after"),
])
def test_sampler_refusals_are_one_line(samplers, tmp_path, capsys, extra, named):
    from tools.real_verl_scripts.harness import write_rows

    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    rc = main(_line(train, samplers, "Reversed", [f"trainer.default_local_dir={tmp_path / 'out'}", *extra]))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: ") and named.format(samplers=samplers) in err[0], err[0]


def test_resumed_run_continues_the_sampler_order(samplers, tmp_path, monkeypatch):
    """main_ppo, 4 steps at once, and 2 steps then resumed to 4 (trainer.resume_mode auto): the same rows per step,
    across the epoch boundary inside step 3 (5 rows, 2 per step)."""
    from tools.real_verl_scripts.harness import write_rows

    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k", n=5)

    def run(out, steps, log):
        monkeypatch.setenv("SAMPLER_LOG", str(tmp_path / log))
        assert main(_line(train, samplers, "LoggedRandom", [f"trainer.total_training_steps={steps}",
                                                            "trainer.save_freq=1", f"trainer.default_local_dir={out}",
                                                            "+logging.progress_bar=false"])) == 0
        return [json.loads(line) for line in (tmp_path / log).read_text().splitlines()]

    whole = run(tmp_path / "a", 4, "a.jsonl")
    run(tmp_path / "b", 2, "b.jsonl")
    assert run(tmp_path / "b", 4, "b.jsonl") == whole
    assert sorted(sum(whole[:2], []) + whole[2][:1]) == [0, 1, 2, 3, 4]  # the first epoch: every row once
