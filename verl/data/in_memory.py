"""The Python API's `train_dataset=` / `eval_dataset=`: what was given -> prompt rows, and a
description of it for the saved config.

Accepted: a `datasets.Dataset`, a list of dicts (records laid out like a jsonl file's lines,
see docs/data.md), a path (str or os.PathLike) or a list of paths. Paths go to
`data.train_files` / `data.val_files` and are read there as usual. In-memory data is read
here into `PromptRow`s, and the config records only a description (`data.train_source`):

    datasets.Dataset rows=12 fingerprint=5f0c... sha256=77d2... columns=prompt,answer
    list of 12 dicts sha256=9a1b... columns=prompt,answer

Each in-memory row keeps its other columns (all but the prompt) in `extra`, next to the keys of
its `extra_info`, so that reward functions receive them (TRL passes dataset columns the same
way; see verl.rewards.callables).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any, Optional

from verl.data.sources import DataError, PromptRow, record_to_row


def _datasets_module():
    # A datasets.Dataset can only exist if `datasets` was imported: no import (and no cost) otherwise
    return sys.modules.get("datasets")


def _is_path(x: Any) -> bool:
    return isinstance(x, (str, os.PathLike))


def _columns(records) -> str:
    return ",".join(dict.fromkeys(k for r in records for k in r)) if records else ""


def describe_records(records: list, digest: str) -> str:
    """'list of N dicts sha256=<digest> columns=...'."""
    return f"list of {len(records)} dicts sha256={digest} columns={_columns(records)}"


def describe_dataset(ds, digest: str) -> str:
    """'datasets.Dataset rows=N fingerprint=... sha256=<digest> columns=...' (+ its cache files, where
    it lives on disk). The fingerprint is datasets' own; it is random for a dataset made by a
    transform datasets could not hash (it warns then), while the sha256 depends on the rows alone."""
    text = (f"datasets.Dataset rows={len(ds)} fingerprint={getattr(ds, '_fingerprint', 'unknown')} "
            f"sha256={digest} columns={','.join(ds.column_names)}")
    files = [f.get("filename") for f in (getattr(ds, "cache_files", None) or []) if f.get("filename")]
    return text + (f" files={','.join(files)}" if files else "")


def _stable_text(value) -> str:
    """JSON stand-in of a value JSON cannot hold: an image (PIL) or bytes by the hash of its content (its
    str() would hold a memory address, so the digest would change from run to run), others their str()."""
    if isinstance(value, (bytes, bytearray)):
        return "bytes:" + hashlib.sha256(bytes(value)).hexdigest()
    if hasattr(value, "tobytes") and hasattr(value, "size") and hasattr(value, "mode"):  # a PIL image
        return f"image:{value.mode}:{value.size}:" + hashlib.sha256(value.tobytes()).hexdigest()
    return str(value)


def rows_with_columns(records, data_cfg, what: str, source: str) -> tuple[list[PromptRow], str]:
    """(PromptRows of dict records, content digest). The columns other than the prompt are added to
    each row's extra. The digest: the first 16 hex digits of the SHA-256 over the records, one
    sorted-key JSON line each (values JSON cannot hold as their str())."""
    rows, h = [], hashlib.sha256()
    for i, record in enumerate(records):
        where = f"{what} row {i}"
        row = record_to_row(record, data_cfg.prompt_key, data_cfg.answer_key, where, source, data_cfg.image_key)
        columns = {k: v for k, v in record.items() if k not in (data_cfg.prompt_key, "extra_info", data_cfg.image_key)}
        row.extra = {**row.extra, **columns}
        rows.append(row)
        h.update(json.dumps(record, sort_keys=True, default=_stable_text, ensure_ascii=False).encode("utf-8") + b"\n")
    if not rows:
        raise DataError(f"{what}: the dataset is empty")
    return rows, h.hexdigest()[:16]


def resolve_dataset(data: Any, data_cfg, what: str) -> tuple[list[str], Optional[list[PromptRow]], Optional[str]]:
    """(paths for data.*_files, rows of in-memory data or None, description for data.*_source or None).

    `what` names the argument in errors (train_dataset / eval_dataset).
    """
    if _is_path(data):
        return [os.fspath(data)], None, None
    ds_mod = _datasets_module()
    if ds_mod is not None:
        if isinstance(data, ds_mod.DatasetDict):
            raise DataError(f"{what}: a DatasetDict with splits {list(data.keys())}; pass one split, "
                            f"e.g. {what}=dataset['train']")
        if isinstance(data, ds_mod.IterableDataset):
            raise DataError(f"{what}: a streaming IterableDataset has no fixed length to shuffle and resume over; "
                            f"pass a datasets.Dataset (e.g. Dataset.from_list(list(stream.take(n))))")
        if isinstance(data, ds_mod.Dataset):
            rows, digest = rows_with_columns(data, data_cfg, what, getattr(data.info, "dataset_name", None) or what)
            return [], rows, describe_dataset(data, digest)
    if isinstance(data, (list, tuple)):
        items = list(data)
        if not items:
            raise DataError(f"{what}: an empty list")
        if all(_is_path(x) for x in items):
            return [os.fspath(x) for x in items], None, None
        if all(isinstance(x, dict) for x in items):
            rows, digest = rows_with_columns(items, data_cfg, what, what)
            return [], rows, describe_records(items, digest)
        like_first = (lambda x: isinstance(x, dict)) if isinstance(items[0], dict) else _is_path
        bad = next(i for i, x in enumerate(items) if not like_first(x))
        raise DataError(f"{what}[{bad}]: a list must hold only dicts (records) or only file paths, "
                        f"got {type(items[bad]).__name__}")
    raise DataError(f"{what}: expected a datasets.Dataset, a list of dicts, a file path or a list of paths, "
                    f"got {type(data).__name__}")
