"""A user's dataset class (data.dataset_class, real verl's data.custom_cls) -> our prompt rows.

    rows = dataset_rows(data_cfg, files, tokenizer)    # one PromptRow per item of the class

The class is built as real verl builds it: cls(data_files=files, tokenizer=tokenizer, config=<real verl's data
config, verl.data.real_data_config>, processor=<the model's processor, None for a text model>, max_samples=-1);
it must be a torch Dataset (real verl's check). Each item `ds[i]` (a dict, as real verl's RLHFDataset returns)
becomes one row:

    prompt        item["raw_prompt"] (what real verl 0.9's agent loop renders), else item[data.prompt_key];
                  chat messages, or text; structured content ([{"type": "text"|"image", ...}]) becomes text
                  with one "<image>" marker per image part
    images        item[data.image_key], else the image parts of structured content, else
                  item["multi_modal_data"]["image"] (older classes' place)
    data_source, reward_model.ground_truth, extra_info, agent_name: as in a file row
                  (verl.data.sources.record_to_row; agent_name picks the row's agent loop, verl/agents/agent_loops.py)

Tokens a class makes itself (input_ids, attention_mask, multi_modal_inputs) are not read: the prompt is
rendered and encoded from its messages here, as real verl 0.9 renders raw_prompt in its agent loop. A class
that fails, or rows we cannot read (no prompt messages, videos, audio), give one line naming the key.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any, Optional

from verl.data.real_data_config import RealDataConfig, real_data_config
from verl.data.sources import DataError, PromptRow, record_to_row
from verl.data.user_class import load_user_class
from verl.errors import ConfigError


def load_dataset_class(spec: str, key: str = "data.dataset_class") -> type:
    from torch.utils.data import Dataset

    return load_user_class(spec, key, Dataset, "torch.utils.data.Dataset (real verl's check)")


def build_dataset(cls: type, files: list, tokenizer, config: RealDataConfig, key: str):
    """cls(...) as real verl's create_rl_dataset calls it; max_samples only where __init__ takes it (-1 is all
    rows either way; older classes, MiniCPM-o's, do not take it)."""
    from verl.data.vl_prompts import processor_of

    kwargs = dict(data_files=list(files), tokenizer=tokenizer, config=config, processor=processor_of(tokenizer))
    params = inspect.signature(cls.__init__).parameters
    if "max_samples" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs["max_samples"] = -1
    import datasets

    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # the class's map/filter bars: stderr keeps one line for an error
    try:
        return cls(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the user's code: any failure is one line
        raise ConfigError(f"{key}: {cls.__name__}(data_files=..., tokenizer=..., config=..., processor=...) failed: "
                          f"{type(exc).__name__}: {_first_line(exc)}") from exc
    finally:
        if shown:
            datasets.enable_progress_bars()


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def _plain(value: Any) -> Any:
    """numpy arrays (pandas-backed rows) -> lists, recursively; other values as they are."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)) and type(value).__module__ == "numpy":
        return _plain(value.tolist())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def flatten_content(messages: Any) -> tuple[Any, list]:
    """(messages with text content, images of their image parts): structured content parts
    [{"type": "text", "text": t}, {"type": "image", "image": x}] -> "t<image>" and [x]."""
    if not isinstance(messages, list):
        return messages, []
    out, images = [], []
    for m in messages:
        content = m.get("content") if isinstance(m, Mapping) else None
        if not isinstance(content, list):
            out.append(m)
            continue
        text = []
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "text":
                text.append(str(part.get("text", "")))
            elif kind == "image":
                text.append("<image>")
                image = part.get("image")
                images.append(image if image is not None else {k: v for k, v in part.items() if k != "type"})
            else:
                raise DataError(f"a message content part of type {kind!r}; text and image parts are read here")
        out.append({**m, "content": "".join(text)})
    return out, images


def item_row(item: Any, where: str, data_cfg, key: str, cls_name: str, default_source: str,
             base_dir: Optional[str] = None) -> PromptRow:
    """One item of the class -> PromptRow (the module doc says which fields are read)."""
    if not isinstance(item, Mapping):
        raise DataError(f"{key}: {where} is a {type(item).__name__}, not a row dict as real verl's RLHFDataset "
                        f"returns")
    item = {k: _plain(v) for k, v in item.items()}
    messages = item.get("raw_prompt")
    if messages is None:
        messages = item.get(data_cfg.prompt_key)
    if messages is None:
        tokens = " (its input_ids, tokens the class made itself, are not read)" if "input_ids" in item else ""
        raise DataError(f"{key}: {cls_name}'s rows have no prompt messages (raw_prompt or '{data_cfg.prompt_key}'; "
                        f"{where} has {', '.join(map(str, item)) or 'no keys'}): here each prompt is rendered from "
                        f"its messages, as real verl 0.9 renders raw_prompt{tokens}")
    for media in ("videos", "audios"):
        if item.get(media):
            raise DataError(f"{key}: {where} has {media}; only images are read here")
    try:
        messages, part_images = flatten_content(messages)
    except DataError as exc:
        raise DataError(f"{key}: {where}: {exc}") from None
    images = item.get(data_cfg.image_key) or part_images or (item.get("multi_modal_data") or {}).get("image")
    record = {data_cfg.prompt_key: messages, "data_source": item.get("data_source"),
              "reward_model": item.get("reward_model"), "extra_info": item.get("extra_info"),
              "agent_name": item.get("agent_name"), data_cfg.image_key: images or None}
    return record_to_row(record, data_cfg.prompt_key, data_cfg.answer_key, where, default_source, data_cfg.image_key,
                         base_dir)


def dataset_rows(data_cfg, files: list, tokenizer, key: str = "data.dataset_class", seed: Optional[int] = None,
                 batch_size: Optional[int] = None, max_response_length: Optional[int] = None) -> list[PromptRow]:
    """The rows of `files` as the class data_cfg.dataset_class reads them; `key`: the key errors name."""
    cls = load_dataset_class(data_cfg.dataset_class, key)
    config = real_data_config(data_cfg, seed=seed, batch_size=batch_size, max_response_length=max_response_length)
    dataset = build_dataset(cls, files, tokenizer, config, key)
    try:
        n = len(dataset)
    except TypeError:
        raise ConfigError(f"{key}: {cls.__name__} has no len(); real verl's dataloader needs a sized map-style "
                          f"dataset") from None
    base_dir = os.path.dirname(os.path.abspath(str(files[0]))) if files else None  # relative image paths
    rows = []
    for i in range(n):
        where = f"{cls.__name__}[{i}]"
        try:
            item = dataset[i]
        except Exception as exc:  # noqa: BLE001 - the user's __getitem__
            raise ConfigError(f"{key}: {where} failed: {type(exc).__name__}: {_first_line(exc)}") from exc
        rows.append(item_row(item, where, data_cfg, key, cls.__name__, cls.__name__, base_dir))
    if not rows:
        raise DataError(f"{key}: {cls.__name__} holds no rows for {', '.join(map(str, files))}")
    return rows
