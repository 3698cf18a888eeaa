"""Reading prompt datasets into `PromptRow`s: jsonl, json, parquet, `datasets.Dataset`.

Two row layouts are understood (see docs/data.md):

* flat:        {"prompt": "What is 2+3?", "answer": "5", ...}
               (keys `data.prompt_key` / `data.answer_key`)
* verl-style:  {"data_source": "openai/gsm8k",
                "prompt": [{"role": "user", "content": "..."}],
                "reward_model": {"style": "rule", "ground_truth": "72"},
                "extra_info": {...}}

Every problem (missing file, empty dataset, bytes that are not UTF-8, malformed JSON line,
a row without the prompt key, a prompt that is neither text nor chat messages) raises
`DataError` with a one-line message naming the file and the line (jsonl, 1-based) or row
(0-based).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional


class DataError(ValueError):
    """A bad dataset: the message names the file and the line or row."""


@dataclass
class PromptRow:
    """One prompt with what the reward function needs to score answers to it.

    prompt:       plain text, or chat messages [{"role": ..., "content": ...}, ...]
    ground_truth: the reference answer for verifiable rewards (None when there is none)
    data_source:  dataset name, used to pick a scorer and to split metrics
    extra:        free-form per-row information (verl's `extra_info`), passed to rewards
    origin:       where the row came from ("train.jsonl line 12"), for error messages
    images:       the row's `data.image_key` value as stored (PIL images, {"bytes", "path"} dicts,
                  bytes or paths; None: a text-only row), decoded by verl.data.multimodal
    base_dir:     the data file's folder: relative image paths are taken from it
    """

    prompt: Any
    ground_truth: Any = None
    data_source: str = "unknown"
    extra: dict = field(default_factory=dict)
    origin: str = ""
    images: Any = None
    base_dir: Optional[str] = None


# ---------------------------------------------------------------------------
# One record -> PromptRow
# ---------------------------------------------------------------------------


def _check_prompt(prompt: Any, where: str) -> Any:
    if isinstance(prompt, str):
        if not prompt.strip():
            raise DataError(f"{where}: the prompt is empty")
        return prompt
    if isinstance(prompt, (list, tuple)) and prompt and all(
            isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
        return [{"role": str(m["role"]), "content": m["content"]} for m in prompt]
    raise DataError(f"{where}: the prompt must be text or a non-empty list of "
                    f"{{'role', 'content'}} messages, got {str(prompt)[:80]!r}")


def record_to_row(record: Any, prompt_key: str = "prompt", answer_key: str = "answer",
                  where: str = "row", default_source: str = "unknown", image_key: str = "images",
                  base_dir: Optional[str] = None) -> PromptRow:
    """Turn one flat or verl-style record (a dict) into a `PromptRow`.

    The row's images are `record[image_key]` as stored (None or [] when it has none).

    Ground truth is taken from `reward_model.ground_truth` (verl layout), else from
    `answer_key`, else from a top-level `ground_truth` key; absent -> None.
    """
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected an object with a '{prompt_key}' key, got {str(record)[:80]!r}")
    if prompt_key not in record or record[prompt_key] is None:
        keys = ", ".join(map(str, record)) or "none"
        raise DataError(f"{where}: no '{prompt_key}' key (keys: {keys}); set data.prompt_key "
                        f"to the column that holds the prompt")
    prompt = _check_prompt(record[prompt_key], where)
    ground_truth = None
    reward_model = record.get("reward_model")
    if isinstance(reward_model, dict) and reward_model.get("ground_truth") is not None:
        ground_truth = reward_model["ground_truth"]
    elif record.get(answer_key) is not None:
        ground_truth = record[answer_key]
    elif record.get("ground_truth") is not None:
        ground_truth = record["ground_truth"]
    extra = record.get("extra_info")
    extra = dict(extra) if isinstance(extra, dict) else {}
    if record.get("agent_name") is not None:  # real verl's per-row agent loop (verl/agents/agent_loops.py)
        extra["agent_name"] = str(record["agent_name"])
    data_source = record.get("data_source") or default_source
    images = record.get(image_key)
    images = None if images is None or (isinstance(images, (list, tuple)) and not images) else images
    return PromptRow(prompt=prompt, ground_truth=ground_truth, data_source=str(data_source),
                     extra=extra, origin=where, images=images, base_dir=base_dir if images is not None else None)


# ---------------------------------------------------------------------------
# Files and datasets -> rows
# ---------------------------------------------------------------------------


def _folder(path: str) -> str:
    """The folder a data file's relative image paths start from."""
    return os.path.dirname(os.path.abspath(path))


def _source_name(path: str) -> str:
    """Default data_source for rows that name none: the file name without extensions."""
    base = os.path.basename(os.path.normpath(path))
    for suffix in (".jsonl", ".json", ".parquet"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base or "unknown"


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _not_utf8(where: str, line: bytes, exc: UnicodeDecodeError) -> DataError:
    """`exc` was raised decoding `line` (one line of the file)."""
    return DataError(f"{where}: not UTF-8 text (byte 0x{line[exc.start]:02x}, the line's byte {exc.start + 1}); "
                     "save the file as UTF-8")


def _read_jsonl(path: str, prompt_key: str, answer_key: str, image_key: str = "images") -> list[PromptRow]:
    rows, source = [], _source_name(path)
    # Bytes first, decoded line by line: a non-UTF-8 byte is reported with its line (text-mode
    # reading would raise a bare UnicodeDecodeError somewhere in the file).
    for lineno, raw in enumerate(_read_bytes(path).splitlines(), start=1):
        where = f"{path} line {lineno}"
        try:
            line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")  # a BOM may open the file
        except UnicodeDecodeError as exc:
            raise _not_utf8(where, raw, exc) from None
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        rows.append(record_to_row(record, prompt_key, answer_key, where, source, image_key, _folder(path)))
    return rows


def _read_json(path: str, prompt_key: str, answer_key: str, image_key: str = "images") -> list[PromptRow]:
    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        for lineno, line in enumerate(raw.splitlines(), start=1):  # find the line to name
            try:
                line.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(f"{path} line {lineno}", line, exc) from None
        raise DataError(f"{path}: not UTF-8 text; save the file as UTF-8") from None  # split inside a character
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.lineno > 1 or "Extra data" in exc.msg:  # one object per line: read it as jsonl
            return _read_jsonl(path, prompt_key, answer_key, image_key)
        raise DataError(f"{path} line {exc.lineno}: malformed JSON ({exc.msg})") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a list of objects, got {type(data).__name__}")
    source = _source_name(path)
    return [record_to_row(r, prompt_key, answer_key, f"{path} row {i}", source, image_key, _folder(path))
            for i, r in enumerate(data)]


def _read_parquet(path: str, prompt_key: str, answer_key: str, image_key: str = "images") -> list[PromptRow]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise DataError(f"{path}: cannot read parquet ({exc})") from None
    if prompt_key not in table.column_names:
        raise DataError(f"{path} row 0: no '{prompt_key}' column (columns: {', '.join(table.column_names)}); "
                        f"set data.prompt_key to the column that holds the prompt")
    source = _source_name(path)
    try:
        records = table.to_pylist()
    except Exception as exc:  # noqa: BLE001 - e.g. a string column holding bytes that are not UTF-8
        raise DataError(f"{path}: cannot read its rows ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    return [record_to_row(r, prompt_key, answer_key, f"{path} row {i}", source, image_key, _folder(path))
            for i, r in enumerate(records)]


def rows_from_dataset(dataset: Any, prompt_key: str = "prompt", answer_key: str = "answer",
                      name: Optional[str] = None, image_key: str = "images") -> list[PromptRow]:
    """Rows of a `datasets.Dataset` (or any iterable of dicts, e.g. a list)."""
    if isinstance(dataset, dict):  # a DatasetDict is a dict of splits
        raise DataError(f"{name or 'dataset'}: a DatasetDict with splits {list(dataset.keys())}; "
                        f"pass one split, e.g. dataset['train']")
    name = name or getattr(getattr(dataset, "info", None), "dataset_name", None) or "dataset"
    rows = [record_to_row(r, prompt_key, answer_key, f"{name} row {i}", name, image_key)
            for i, r in enumerate(dataset)]
    if not rows:
        raise DataError(f"{name}: the dataset is empty")
    return rows


def read_rows(source: Any, prompt_key: str = "prompt", answer_key: str = "answer",
              image_key: str = "images") -> list[PromptRow]:
    """Rows of one file (.jsonl/.json/.parquet), a `datasets.save_to_disk` folder, or a Dataset."""
    if not isinstance(source, (str, os.PathLike)):
        return rows_from_dataset(source, prompt_key, answer_key, image_key=image_key)
    path = os.fspath(source)
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "dataset_info.json")):
            raise DataError(f"{path}: a folder that is not a saved `datasets` dataset; "
                            f"name .jsonl or .parquet files instead")
        import datasets

        return rows_from_dataset(datasets.load_from_disk(path), prompt_key, answer_key, name=path, image_key=image_key)
    lower = path.lower()
    if lower.endswith(".parquet"):
        rows = _read_parquet(path, prompt_key, answer_key, image_key)
    elif lower.endswith(".json"):
        rows = _read_json(path, prompt_key, answer_key, image_key)
    elif lower.endswith(".jsonl") or lower.endswith(".ndjson"):
        rows = _read_jsonl(path, prompt_key, answer_key, image_key)
    else:
        raise DataError(f"{path}: unknown format; use .jsonl, .json or .parquet")
    if not rows:
        raise DataError(f"{path}: the dataset is empty")
    return rows


def read_many(sources: Iterable[Any], prompt_key: str = "prompt", answer_key: str = "answer",
              image_key: str = "images") -> list[PromptRow]:
    """Rows of several files/datasets, concatenated in the order given."""
    rows: list[PromptRow] = []
    for src in sources:
        rows.extend(read_rows(src, prompt_key, answer_key, image_key))
    return rows
