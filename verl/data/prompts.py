"""Prompts in, left-padded token batches out.

    rows = load_prompt_rows(cfg.data)                    # files, inline prompts or defaults
    loader = PromptLoader(rows, tokenizer, cfg.data, batch_size=8, seed=42)
    batch = loader.next_batch()                          # Batch with input_ids (B, P) ...

Rendering: with `data.apply_chat_template` and a tokenizer that has a chat template, the
prompt (text -> one user message; `data.system_prompt` -> a leading system message) goes
through `apply_chat_template(..., add_generation_prompt=True)`; otherwise it is used as
plain text (chat messages are joined by newlines, the system prompt first).

Order: the loader runs forever over epochs. Epoch e visits the rows in the permutation
drawn from a torch.Generator seeded by (seed, e) (identity order when `data.shuffle` is
off); a batch that runs out of rows continues into the next epoch's permutation. The
state (epoch, position, next group id) is three integers, so a resumed run sees exactly
the batches an uninterrupted run would have seen. With `data.sampler_class` a user's sampler
gives each epoch's order instead (verl.data.custom_sampler: its resume rules).
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Optional

import torch

from verl.agents.agent_loops import MULTI_TURN, row_agent
from verl.batch import Batch
from verl.data.sources import DataError, PromptRow, read_many, record_to_row

__all__ = ["PromptRow", "DataError", "DEFAULT_PROMPTS", "load_prompt_rows", "inline_rows", "render_prompt",
           "PromptLoader", "build_prompt_loaders"]

# Used when the config names no data (the seed's first example names none: GPT-2 learns,
# under a string_match reward, to continue them towards "I love reinforcement learning").
# Short open-ended English starts, so that a tiny or small model can continue any of them.
DEFAULT_PROMPTS: tuple[str, ...] = (
    "I love",
    "Tell me about",
    "Explain reinforcement learning in one sentence.",
    "What do you enjoy most?",
    "My favourite subject is",
    "Today I learned that",
    "The best thing about learning is",
    "Write a short sentence about the sea.",
    "Once upon a time",
    "Describe your favourite food.",
    "What is the capital of France?",
    "Give one reason why exercise helps.",
    "The robot said",
    "Here is a fun fact:",
    "Reinforcement learning is",
    "Hello, how are you today?",
)


# ---------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------


def inline_rows(prompts: list, data_cfg) -> list[PromptRow]:
    """Rows for `data.prompts`: strings, or dicts laid out like dataset records."""
    rows = []
    for i, p in enumerate(prompts):
        where = f"data.prompts[{i}]"
        if isinstance(p, dict):
            rows.append(record_to_row(p, data_cfg.prompt_key, data_cfg.answer_key, where, "inline", data_cfg.image_key))
        else:
            rows.append(record_to_row({"prompt": p}, where=where, default_source="inline"))
    return rows


def load_prompt_rows(data_cfg, files: Any = None, key: str = "data.train_files", tokenizer=None,
                     run=None) -> list[PromptRow]:
    """The prompt rows of `files` (paths and/or `datasets.Dataset`s; default `data.train_files`); `key`: the
    config key that named them, for the error of a missing file. With `data.dataset_class`, the files are
    read by that class (verl.data.custom_dataset), built with `tokenizer` and, from `run` (the full Config,
    optional), the seed, prompts per step and response length its data config holds.

    With no files: the inline `data.prompts`, else `DEFAULT_PROMPTS`.
    Raises `DataError` naming the file and line/row for any bad input.
    """
    if files is None:
        files = data_cfg.train_files
    if files is not None and not isinstance(files, (list, tuple)):
        files = [files]  # one path or one Dataset
    if files:
        for f in files:
            if isinstance(f, (str, os.PathLike)) and not os.path.exists(f):
                raise DataError(missing_file_line(key, os.fspath(f), data_cfg.config_file))
        if data_cfg.dataset_class:
            return _class_rows(data_cfg, files, tokenizer, run)
        return read_many(files, data_cfg.prompt_key, data_cfg.answer_key, data_cfg.image_key)
    if data_cfg.dataset_class:
        raise DataError("data.dataset_class: it reads data.train_files, and none are given")
    if data_cfg.prompts:
        return inline_rows(data_cfg.prompts, data_cfg)
    return [PromptRow(prompt=p, data_source="default", origin=f"DEFAULT_PROMPTS[{i}]")
            for i, p in enumerate(DEFAULT_PROMPTS)]


def _class_rows(data_cfg, files: list, tokenizer, run) -> list[PromptRow]:
    from verl.data.custom_dataset import dataset_rows

    if tokenizer is None or not all(isinstance(f, (str, os.PathLike)) for f in files):
        raise DataError("data.dataset_class: it reads files (data.train_files / data.val_files) with the model's "
                        "tokenizer; in-memory datasets and calls without a tokenizer are not read by it")
    extras = {} if run is None else dict(seed=run.seed, batch_size=run.training.batch_size,
                                         max_response_length=run.rollout.max_new_tokens)
    return dataset_rows(data_cfg, [os.fspath(f) for f in files], tokenizer, **extras)


def missing_file_line(key: str, path: str, config_file: str) -> str:
    """The one line for a data file that is not there: the key, the path as written and, for a relative path
    from a config file, the two places it was looked for (verl/config/paths.py)."""
    line = f"{key}: {path}: no such file"
    if config_file and not os.path.isabs(path):
        folder = os.path.dirname(os.path.abspath(config_file))
        line += (f" (a relative path in {config_file} is read from that file's folder, {folder}, then from the "
                 f"working directory, {os.getcwd()}; it is in neither)")
    elif not os.path.isabs(path):
        line += f" (relative to the working directory, {os.getcwd()})"
    return line


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


def uses_chat_template(tokenizer, data_cfg) -> bool:
    return bool(data_cfg.apply_chat_template and getattr(tokenizer, "chat_template", None))


def prompt_messages(prompt: Any, data_cfg) -> list[dict]:
    """`prompt` (str or chat messages) as chat messages, `data.system_prompt` first when it has none."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if data_cfg.system_prompt and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": data_cfg.system_prompt}] + messages
    return messages


def render_prompt(prompt: Any, tokenizer, data_cfg, tools: Optional[list] = None) -> str:
    """The text the model sees for `prompt` (str or chat messages); see the module doc. `tools`:
    JSON schemas of the rollout's tools, passed to the chat template (which decides how the model
    sees them; a template without tool support ignores them)."""
    messages = prompt_messages(prompt, data_cfg)
    if uses_chat_template(tokenizer, data_cfg):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             **({"tools": tools} if tools else {}), **data_cfg.chat_template_kwargs)
    if isinstance(prompt, str) and len(messages) == 1:
        return prompt
    return "\n".join(str(m["content"]) for m in messages)


# ---------------------------------------------------------------------------
# The loader
# ---------------------------------------------------------------------------


def _merge_rows(n: int, picked: list[int], rest: tuple, encoded: tuple) -> tuple:
    """Per-row columns of all n rows from those of the rows at `picked` (`encoded`) and of the others
    (`rest`), both in row order."""
    merged = []
    for rest_col, picked_col in zip(rest, encoded):
        out, it_rest, it_picked, at = [], iter(rest_col), iter(picked_col), set(picked)
        for i in range(n):
            out.append(next(it_picked) if i in at else next(it_rest))
        merged.append(out)
    return tuple(merged)


def _epoch_seed(seed: int, epoch: int) -> int:
    return (seed * 1_000_003 + epoch) % (2**63 - 1)


class PromptLoader:
    """Endless, seeded, resumable batches of tokenized prompts.

    Batch fields: input_ids (B, P) long, left-padded with the pad token (eos when the
    tokenizer has none); attention_mask (B, P) long; prompt_text (rendered text);
    ground_truth; data_source; extra (dicts); group_id (a new integer per prompt, increasing
    across batches). P is the longest prompt in the batch (<= data.max_prompt_length).
    """

    def __init__(self, rows: list[PromptRow], tokenizer, data_cfg, batch_size: int, seed: int = 0,
                 shuffle: Optional[bool] = None, name: str = "train", tools: Optional[list] = None,
                 default_agent: str = MULTI_TURN):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.tokenizer = tokenizer
        self.data_cfg = data_cfg
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = data_cfg.shuffle if shuffle is None else shuffle
        self.name = name
        self.tools = tools
        self.default_agent = default_agent  # rows of a single-turn agent loop see no tools (agent_loops.py)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id = 0 if pad is None else pad
        self.num_filtered = 0
        self.num_truncated = 0
        self.rows, self.texts, self.token_ids = self._encode(list(rows))
        # Position in the endless stream (the resumable state)
        self.epoch = 0
        self.position = 0
        self.next_group_id = 0
        self._order_cache: tuple[int, list[int]] = (-1, [])
        # data.sampler_class: a user's sampler gives the order instead (verl.data.custom_sampler); the row of
        # each group id handed out lately, for its update(batch)
        self.order = None
        self._row_of_group: dict[int, int] = {}

    # ------------------------------------------------------------ encoding
    def _tools_of(self, row: PromptRow) -> Optional[list]:
        """The tool schemas `row`'s prompt shows: none for a row of the single-turn agent loop."""
        if not self.tools:
            return self.tools
        try:
            agent = row_agent(row.extra, self.default_agent)
        except ValueError as exc:
            raise DataError(f"{row.origin or self.name}: {exc}") from None
        return self.tools if agent == MULTI_TURN else None

    def _encode(self, rows: list[PromptRow]):
        if not rows:
            raise DataError(f"{self.name} data: no prompt rows")
        cfg = self.data_cfg
        with_images = [i for i, r in enumerate(rows) if r.images is not None]
        text_rows = [r for r in rows if r.images is None]
        texts = [render_prompt(r.prompt, self.tokenizer, cfg, self._tools_of(r)) for r in text_rows]
        # A chat template writes its own special tokens; plain text gets the tokenizer's (e.g. BOS).
        add_special = not uses_chat_template(self.tokenizer, cfg)
        ids = self.tokenizer(texts, add_special_tokens=add_special)["input_ids"] if texts else []
        multi_modal: list = [None] * len(ids)
        if with_images:  # rows with images: the processor's expanded ids (verl.data.multimodal)
            from verl.data.vl_prompts import encode_image_rows

            # the rows whose prompt shows the tools, and the others, each encoded as one group
            groups = {}
            for i in with_images:
                groups.setdefault(self._tools_of(rows[i]) is not None, []).append(i)
            encoded = {}
            for shows_tools, members in groups.items():
                parts = encode_image_rows([rows[i] for i in members], self.tokenizer, cfg,
                                          self.tools if shows_tools else None)
                encoded.update({i: tuple(p[k] for p in parts) for k, i in enumerate(members)})
            texts, ids, multi_modal = _merge_rows(len(rows), with_images, (texts, ids, multi_modal),
                                                  tuple(list(col) for col in zip(*(encoded[i] for i in with_images))))
        limit, mode = cfg.max_prompt_length, cfg.truncation
        keep_rows, keep_texts, keep_ids, keep_mm = [], [], [], []
        for row, text, tok, mm in zip(rows, texts, ids, multi_modal):
            if len(tok) > limit:
                counted = " (image placeholders expanded, as the model sees them)" if mm is not None else ""
                if mode == "error" or (mm is not None and mode != "filter"):
                    cut = "" if mode == "error" else f"; data.truncation={mode} cannot cut a prompt with images"
                    raise DataError(f"{row.origin or self.name}: the prompt has {len(tok)} tokens{counted}, more "
                                    f"than data.max_prompt_length={limit} (data.truncation={mode}){cut}")
                if mode == "filter":
                    self.num_filtered += 1
                    continue
                tok = tok[-limit:] if mode == "left" else tok[:limit]
                text = self.tokenizer.decode(tok)
                self.num_truncated += 1
            keep_rows.append(row)
            keep_texts.append(text)
            keep_ids.append(list(tok))
            keep_mm.append(mm)
        if self.num_filtered:
            print(f"[verl.data] {self.name}: dropped {self.num_filtered} of {len(rows)} prompts longer than "
                  f"data.max_prompt_length={limit} tokens (data.truncation=filter)")
        if self.num_truncated:
            print(f"[verl.data] {self.name}: cut {self.num_truncated} of {len(rows)} prompts to "
                  f"data.max_prompt_length={limit} tokens (data.truncation={mode})")
        if not keep_rows:
            raise DataError(f"{self.name} data: all {len(rows)} prompts are longer than "
                            f"data.max_prompt_length={limit} tokens; raise it or use data.truncation=left")
        self.multi_modal = keep_mm if any(m is not None for m in keep_mm) else []
        return keep_rows, keep_texts, keep_ids

    def __len__(self) -> int:
        return len(self.rows)

    # ------------------------------------------------------------ ordering
    def _order(self, epoch: int) -> list[int]:
        if self._order_cache[0] != epoch:
            n = len(self.rows)
            if self.shuffle:
                g = torch.Generator().manual_seed(_epoch_seed(self.seed, epoch))
                order = torch.randperm(n, generator=g).tolist()
            else:
                order = list(range(n))
            self._order_cache = (epoch, order)
        return self._order_cache[1]

    def use_sampler(self, order) -> None:
        """Take the order from `order` (a verl.data.custom_sampler.SamplerOrder over self.rows)."""
        self.order = order

    def _sampled_indices(self) -> list[int]:
        out = []
        while len(out) < self.batch_size:
            index = self.order.next(self.epoch, self.position)
            if index is None:  # the sampler's epoch ended: the batch continues into the next one
                self.epoch, self.position = self.epoch + 1, 0
                continue
            out.append(index)
            self.position += 1
        return out

    def next_indices(self) -> list[int]:
        """Row indices of the next batch, advancing the state (crosses epochs if needed)."""
        if self.order is not None:
            return self._sampled_indices()
        n, out = len(self.rows), []
        while len(out) < self.batch_size:
            order = self._order(self.epoch)
            take = min(self.batch_size - len(out), n - self.position)
            out.extend(order[self.position:self.position + take])
            self.position += take
            if self.position == n:
                self.epoch, self.position = self.epoch + 1, 0
        return out

    def next_batch(self) -> Batch:
        indices = self.next_indices()
        group_ids = list(range(self.next_group_id, self.next_group_id + len(indices)))
        self.next_group_id += len(indices)
        if self.order is not None:
            self._row_of_group.update(zip(group_ids, indices))
        return self.make_batch(indices, group_ids)

    def after_step(self, batch: Batch, step: int) -> None:
        """After training step `step` on `batch`: a curriculum sampler's update(batch) (data.sampler_class)."""
        if self.order is None or not self.order.curriculum:
            return
        rows = [self._row_of_group[g] for g in batch.group_id]
        self.order.update(batch, rows, step)
        done = min(batch.group_id, default=0)  # groups before this batch's are not handed out again
        self._row_of_group = {g: r for g, r in self._row_of_group.items() if g >= done}

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.next_batch()

    def one_pass(self, batch_size: Optional[int] = None) -> Iterator[Batch]:
        """All rows once, in stored order (validation); group_id = row index. State untouched."""
        size = batch_size or self.batch_size
        for start in range(0, len(self.rows), size):
            idx = list(range(start, min(start + size, len(self.rows))))
            yield self.make_batch(idx, idx)

    def make_batch(self, indices: list[int], group_ids: list[int]) -> Batch:
        seqs = [self.token_ids[i] for i in indices]
        width = max(len(s) for s in seqs)
        input_ids = torch.full((len(seqs), width), self.pad_token_id, dtype=torch.long)  # (B, P)
        attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)  # (B, P)
        for b, s in enumerate(seqs):
            if s:
                input_ids[b, width - len(s):] = torch.tensor(s, dtype=torch.long)
                attention_mask[b, width - len(s):] = 1
        rows = [self.rows[i] for i in indices]
        return Batch(input_ids=input_ids, attention_mask=attention_mask,
                     prompt_text=[self.texts[i] for i in indices],
                     raw_prompt=[r.prompt for r in rows],
                     ground_truth=[r.ground_truth for r in rows],
                     data_source=[r.data_source for r in rows],
                     extra=[dict(r.extra) for r in rows],
                     group_id=list(group_ids),
                     multi_modal=[self.multi_modal[i] for i in indices] if self.multi_modal else [])

    # ------------------------------------------------------------ resume
    def state_dict(self) -> dict:
        state = {"epoch": self.epoch, "position": self.position, "next_group_id": self.next_group_id,
                 "seed": self.seed, "num_rows": len(self.rows), "shuffle": self.shuffle}
        if self.order is not None:
            state["sampler"] = self.order.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        if state["num_rows"] != len(self.rows):
            raise DataError(f"{self.name} data: the checkpoint was taken with {state['num_rows']} prompt rows, "
                            f"the data now has {len(self.rows)}; resume with the same data and settings")
        if state["seed"] != self.seed or state["shuffle"] != self.shuffle:
            raise DataError(f"{self.name} data: the checkpoint used seed={state['seed']} shuffle={state['shuffle']}, "
                            f"this run seed={self.seed} shuffle={self.shuffle}; the data order would differ")
        if ("sampler" in state) != (self.order is not None):
            raise DataError(f"{self.name} data: the checkpoint was taken {'with' if 'sampler' in state else 'without'} "
                            f"data.sampler_class, this run is {'without' if self.order is None else 'with'} it; the "
                            f"data order would differ")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self.next_group_id = int(state["next_group_id"])
        if self.order is not None:
            self.order.load_state_dict(state["sampler"])


def build_prompt_loaders(cfg, tokenizer, train_rows: Optional[list[PromptRow]] = None,
                         val_rows: Optional[list[PromptRow]] = None,
                         tools: Optional[list] = None) -> tuple[PromptLoader, Optional[list[PromptRow]]]:
    """(train loader, validation rows or None) for a full `Config`.

    Training data: `train_rows` (in-memory data of the Python API, verl.data.in_memory), else
    `data.train_files` (read by `data.dataset_class` when given), else `data.prompts`, else `DEFAULT_PROMPTS`;
    in the order of `data.sampler_class` when given.
    Validation rows: `val_rows`, else `data.val_files`; the first `data.val_max_samples` of them.
    """
    rows = load_prompt_rows(cfg.data, tokenizer=tokenizer, run=cfg) if train_rows is None else train_rows
    train = PromptLoader(rows, tokenizer, cfg.data, batch_size=cfg.training.batch_size, seed=cfg.seed, tools=tools,
                         default_agent=cfg.rollout.multi_turn.default_agent)
    if cfg.data.sampler_class:
        from verl.data.custom_sampler import SamplerOrder

        train.use_sampler(SamplerOrder.build(cfg.data, train.rows, cfg.seed, batch_size=cfg.training.batch_size,
                                             max_response_length=cfg.rollout.max_new_tokens))
    if val_rows is None and cfg.data.val_files:
        val_rows = load_prompt_rows(cfg.data, cfg.data.val_files, key="data.val_files", tokenizer=tokenizer, run=cfg)
    return train, (None if val_rows is None else list(val_rows)[: cfg.data.val_max_samples])
