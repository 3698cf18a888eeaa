"""Real verl's `RLHFDataset` interface, for user dataset classes written against it (data.dataset_class).

    from verl.utils.dataset.rl_dataset import RLHFDataset     # as in real verl

    class MyDataset(RLHFDataset):
        def _read_files_and_tokenize(self):
            super()._read_files_and_tokenize()
            self.dataframe = self.dataframe.map(self.map_fn)

Our package is named `verl` too, so such a class imports this module. It is our own code with real verl
0.9's constructor, attributes and hooks: `__init__(data_files, tokenizer, config, processor=None,
max_samples=-1)` reads the same config keys into the same attributes, then calls `_download()` and
`_read_files_and_tokenize()`, which reads the parquet / json / jsonl files into `self.dataframe` (a
`datasets.Dataset`, in memory) and keeps the first `max_samples` rows (-1: all) before
`maybe_filter_out_long_prompts`. `__getitem__(i)` returns the row (a dict of its columns) with `raw_prompt`
(the prompt messages, `_build_messages`), `index`, `tools_kwargs` and `interaction_kwargs` added, as real
verl's does. verl.data.custom_dataset reads every item of the class into our prompt rows.

Differences, all in what the base class does for itself (a subclass's overrides run as written):
`maybe_filter_out_long_prompts` returns the rows unchanged (our loader drops or cuts long prompts with
data.truncation after rendering them, the same rule); `_download` reads local paths only (no HDFS copy);
images stay in the image column (real verl's `_build_messages` moves them into structured message content;
structured content a subclass writes is read as well); `process_vision_info` and `split` are not offered.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Optional

from torch.utils.data import Dataset

__all__ = ["RLHFDataset"]


def _read_table(path: str):
    """One parquet / json / jsonl file as a datasets.Dataset held in memory (no cache files written)."""
    import datasets

    lower = path.lower()
    if lower.endswith(".parquet"):
        import pyarrow.parquet as pq

        return datasets.Dataset(pq.read_table(path))
    if lower.endswith((".jsonl", ".ndjson")):
        with open(path, encoding="utf-8-sig") as fh:
            return datasets.Dataset.from_list([json.loads(line) for line in fh if line.strip()])
    if lower.endswith(".json"):
        with open(path, encoding="utf-8-sig") as fh:
            data = json.load(fh)
        return datasets.Dataset.from_list(data if isinstance(data, list) else [data])
    raise ValueError(f"Unsupported file format: {path}")  # real verl's message


class RLHFDataset(Dataset):
    """Rows of parquet / json files with real verl's RLHFDataset interface (see the module doc)."""

    def __init__(self, data_files, tokenizer, config, processor=None, max_samples: int = -1):
        if not isinstance(data_files, (list, tuple)):
            data_files = [data_files]
        self.data_files = copy.deepcopy(list(data_files))
        self.original_data_files = copy.deepcopy(list(data_files))  # real verl re-reads these on resume
        self.tokenizer = tokenizer
        self.processor = processor
        self.max_samples = max_samples
        self.config = config
        self.cache_dir = os.path.expanduser(config.get("cache_dir", "~/.cache/verl/rlhf"))
        self.prompt_key = config.get("prompt_key", "prompt")
        self.image_key = config.get("image_key", "images")
        self.video_key = config.get("video_key", "videos")
        self.audio_key = config.get("audio_key", "audios")
        self.image_patch_size = config.get("image_patch_size") or 14
        self.max_prompt_length = config.get("max_prompt_length", 1024)
        self.return_raw_chat = config.get("return_raw_chat", False)
        self.return_full_prompt = config.get("return_full_prompt", False)
        self.truncation = config.get("truncation", "error")
        self.filter_overlong_prompts = config.get("filter_overlong_prompts", True)
        self.apply_chat_template_kwargs = config.get("apply_chat_template_kwargs", {})
        self.mm_processor_kwargs = config.get("mm_processor_kwargs", {})
        self.tool_config_path = config.get("tool_config_path", None)
        self.function_tool_path = config.get("function_tool_path", None)
        self.tool_schemas = None
        self.num_workers = config.get("filter_overlong_prompts_workers", 1)
        self.use_shm = config.get("use_shm", False)
        self.chat_template_func = config.get("chat_template_func", None)
        self.need_tools_kwargs = config.get("need_tools_kwargs", False)
        self.filter_prompts = config.get("filter_prompts", True)
        self.serialize_dataset = False
        self.return_multi_modal_inputs = config.get("return_multi_modal_inputs", True)
        self.shuffle = config.get("shuffle", False)
        self.seed = config.get("seed")
        self._download()
        self._read_files_and_tokenize()

    def _download(self, use_origin_parquet: bool = False) -> None:
        files = self.original_data_files if use_origin_parquet else self.data_files
        self.data_files = [os.path.expanduser(str(f)) for f in files]

    def _read_files_and_tokenize(self) -> None:
        import datasets

        self.dataframe = datasets.concatenate_datasets([_read_table(f) for f in self.data_files])
        if 0 < self.max_samples < len(self.dataframe):  # only -1 reaches here through main_ppo
            self.dataframe = self.dataframe.select(range(self.max_samples))
        self.dataframe = self.maybe_filter_out_long_prompts(self.dataframe)

    def maybe_filter_out_long_prompts(self, dataframe=None):
        """Unchanged: our loader applies data.truncation to the rendered prompts (the module doc)."""
        return dataframe

    def resume_dataset_state(self) -> None:
        self._download(use_origin_parquet=True)
        self._read_files_and_tokenize()

    def __len__(self) -> int:
        return len(self.dataframe)

    def _build_messages(self, example: dict, key: Optional[str] = None) -> Any:
        """The row's prompt messages (their text keeps its <image> markers; the images stay in their column)."""
        return example[key or self.prompt_key]

    def __getitem__(self, item: int) -> dict:
        row = dict(self.dataframe[item])
        row["raw_prompt"] = self._build_messages(row, key=self.prompt_key)
        if row.get("extra_info") is None:
            row["extra_info"] = {}
        extra = row["extra_info"]
        row["index"] = extra.get("index", 0)
        row["tools_kwargs"] = extra.get("tools_kwargs", {})
        row["interaction_kwargs"] = extra.get("interaction_kwargs", {})
        return row
