"""Reading prompt datasets: formats, key layouts and error messages that name file and line."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl.config import DataConfig
from verl.data.prompts import DEFAULT_PROMPTS, load_prompt_rows
from verl.data.sources import DataError, PromptRow, read_rows


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


VERL_ROWS = [
    {"data_source": "openai/gsm8k",
     "prompt": [{"role": "user", "content": "Natalia sold 48 clips. How many? Let's think step by step."}],
     "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "72"},
     "extra_info": {"split": "train", "index": 0}},
    {"data_source": "openai/gsm8k",
     "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}],
     "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "5"},
     "extra_info": {"split": "train", "index": 1}},
]


def test_jsonl_flat_rows(tmp_path):
    path = write_jsonl(tmp_path / "arith.jsonl", [
        {"prompt": "What is 2+3?", "answer": "5"},
        {"prompt": "What is 4+4?", "answer": 8, "data_source": "mine", "extra_info": {"k": 1}},
        {"prompt": "Say hi"},
    ])
    rows = load_prompt_rows(DataConfig(), [path])
    assert rows[0] == PromptRow("What is 2+3?", "5", "arith", {}, f"{path} line 1")
    assert (rows[1].ground_truth, rows[1].data_source, rows[1].extra) == (8, "mine", {"k": 1})
    assert rows[2].ground_truth is None


def test_custom_keys_and_blank_lines(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"question": "Why?", "solution": "Because"}\n\n{"question": "How?", "solution": "So"}\n')
    rows = load_prompt_rows(DataConfig(prompt_key="question", answer_key="solution"), str(path))
    assert [(r.prompt, r.ground_truth) for r in rows] == [("Why?", "Because"), ("How?", "So")]
    assert rows[1].origin.endswith("line 3")


def test_parquet_verl_layout(tmp_path):
    path = str(tmp_path / "gsm8k_train.parquet")
    pq.write_table(pa.Table.from_pylist(VERL_ROWS), path)
    rows = load_prompt_rows(DataConfig(), [path])
    assert len(rows) == 2
    assert rows[0].prompt == VERL_ROWS[0]["prompt"]
    assert rows[1].prompt[0] == {"role": "system", "content": "Be brief."}
    assert [r.ground_truth for r in rows] == ["72", "5"]
    assert rows[0].data_source == "openai/gsm8k"
    assert rows[1].extra == {"split": "train", "index": 1}
    assert rows[1].origin == f"{path} row 1"


def test_datasets_dataset_and_saved_folder(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list([{"prompt": "Hi", "answer": "1"}, {"prompt": "Yo", "answer": "2"}])
    rows = load_prompt_rows(DataConfig(), ds)
    assert [(r.prompt, r.ground_truth) for r in rows] == [("Hi", "1"), ("Yo", "2")]
    verl_ds = datasets.Dataset.from_list(VERL_ROWS)
    rows = load_prompt_rows(DataConfig(), [verl_ds])
    assert [r.ground_truth for r in rows] == ["72", "5"] and rows[0].data_source == "openai/gsm8k"
    folder = str(tmp_path / "saved")
    ds.save_to_disk(folder)
    assert [r.prompt for r in read_rows(folder)] == ["Hi", "Yo"]
    with pytest.raises(DataError, match="DatasetDict.*dataset\\['train'\\]"):
        load_prompt_rows(DataConfig(), [datasets.DatasetDict({"train": ds})])


def test_several_files_concatenate_in_order(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "one"}])
    b = str(tmp_path / "b.parquet")
    pq.write_table(pa.Table.from_pylist([{"prompt": "two", "answer": "2"}]), b)
    c = tmp_path / "c.json"
    c.write_text(json.dumps([{"prompt": "three"}]))
    rows = load_prompt_rows(DataConfig(), [a, b, str(c)])
    assert [(r.prompt, r.data_source) for r in rows] == [("one", "a"), ("two", "b"), ("three", "c")]


def test_no_files_means_inline_prompts_then_defaults():
    rows = load_prompt_rows(DataConfig())
    assert [r.prompt for r in rows] == list(DEFAULT_PROMPTS) and len(rows) == 16
    assert {r.data_source for r in rows} == {"default"}
    rows = load_prompt_rows(DataConfig(prompts=["Hello", {"prompt": "2+2?", "answer": "4"}]))
    assert [(r.prompt, r.ground_truth, r.data_source) for r in rows] == [("Hello", None, "inline"),
                                                                          ("2+2?", "4", "inline")]


@pytest.mark.parametrize("content, pattern", [
    ('{"prompt": "a"}\n{"prompt": "b"\n', r"line 2: malformed JSON"),
    ('{"prompt": "a"}\n{"question": "b"}\n', r"line 2: no 'prompt' key \(keys: question\)"),
    ('{"prompt": 3}\n', r"line 1: the prompt must be text or .* messages"),
    ('{"prompt": [{"content": "no role"}]}\n', r"line 1: the prompt must be"),
    ('["prompt"]\n', r"line 1: expected an object"),
    ("", r"the dataset is empty"),
    ("\n\n", r"the dataset is empty"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, content, pattern):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=pattern) as info:
        load_prompt_rows(DataConfig(), [str(path)])
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message
    assert isinstance(info.value, ValueError)


def test_file_errors(tmp_path):
    with pytest.raises(DataError, match=r"missing\.jsonl: no such file"):
        load_prompt_rows(DataConfig(), [str(tmp_path / "missing.jsonl")])
    other = tmp_path / "data.csv"
    other.write_text("prompt\nhi\n")
    with pytest.raises(DataError, match=r"data\.csv: unknown format"):
        load_prompt_rows(DataConfig(), [str(other)])
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(DataError, match="not a saved `datasets` dataset"):
        load_prompt_rows(DataConfig(), [str(folder)])
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet")
    with pytest.raises(DataError, match=r"broken\.parquet: cannot read parquet"):
        load_prompt_rows(DataConfig(), [str(broken)])


def test_parquet_errors_name_file_and_row(tmp_path):
    path = str(tmp_path / "q.parquet")
    pq.write_table(pa.Table.from_pylist([{"question": "a"}]), path)
    with pytest.raises(DataError, match=r"q\.parquet row 0: no 'prompt' column \(columns: question\)"):
        load_prompt_rows(DataConfig(), [path])
    pq.write_table(pa.Table.from_pylist([{"prompt": "a"}, {"prompt": None}]), path)
    with pytest.raises(DataError, match=r"q\.parquet row 1: no 'prompt' key"):
        load_prompt_rows(DataConfig(), [path])
    pq.write_table(pa.Table.from_pylist([{"prompt": "a"}]).slice(0, 0), path)
    with pytest.raises(DataError, match=r"q\.parquet: the dataset is empty"):
        load_prompt_rows(DataConfig(), [path])
