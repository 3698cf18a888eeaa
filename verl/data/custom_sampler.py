"""A user's sampler (data.sampler_class, real verl's data.sampler) deciding the order of training prompts.

    order = SamplerOrder.build(data_cfg, rows, seed)     # rows: the loader's rows (after data.truncation)
    index = order.next(epoch, position)                   # the row at `position` of epoch `epoch`; None: it ended
    order.update(batch, row_of_sample)                    # after each step (a curriculum sampler's update)

The sampler is built as real verl builds it, cls(data_source=<the rows>, data_config=<real verl's data config>),
and must be a verl.experimental.dataset.sampler.AbstractSampler (real verl's check). `data_source[i]` is row i
as a dict (prompt, data_source, reward_model.ground_truth, extra_info, images). An epoch is one pass of
`iter(sampler)`; the loader fills its batches from it and, when it ends, from the next epoch's `iter(sampler)`.
The sampler's indices are drawn one batch at a time, so a curriculum sampler's update(batch) after a step is
seen by the next batch's draws, as in real verl with data.dataloader_num_workers=0.

Random numbers: the sampler runs with its own state of torch's, Python's and numpy's global generators,
seeded by (seed, epoch) when each epoch starts and kept between draws; the run's generators are untouched. So a
sampler drawing from the global generators (torch's RandomSampler without a generator, as real verl's
RandomCurriculumSampler) gives one order per seed.

Resume (state_dict / load_state_dict, saved in the checkpoint with the data position):
  * a sampler with state_dict() and load_state_dict(): its state and the generators' are saved after each step
    and loaded on resume; iter(sampler) then continues the epoch where it stopped (its state must say where,
    as torchdata's stateful samplers do);
  * any other sampler: the epoch's iterator is started again from the epoch's seed and `position` indices are
    drawn and dropped (torch's StatefulDataLoader does the same), which gives the same order when the order
    follows from the seed alone (a curriculum sampler's update() state is not replayed: give it a state_dict).
"""

from __future__ import annotations

import base64
import io
import operator
import random
from typing import Any, Optional, Sized

import torch

from verl.data.sources import DataError, PromptRow
from verl.data.user_class import load_user_class
from verl.errors import ConfigError

KEY = "data.sampler_class"


def load_sampler_class(spec: str, key: str = KEY) -> type:
    from verl.experimental.dataset.sampler import AbstractSampler

    return load_user_class(spec, key, AbstractSampler,
                           "verl.experimental.dataset.sampler.AbstractSampler (real verl's check)")


class SamplerRows(Sized):
    """The loader's rows as real verl's dataset items, for a sampler to read (data_source[i])."""

    def __init__(self, rows: list[PromptRow]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        r = self.rows[i]
        return {"prompt": r.prompt, "data_source": r.data_source, "reward_model": {"ground_truth": r.ground_truth},
                "extra_info": dict(r.extra), "images": r.images, "index": r.extra.get("index", i)}


def pack(obj: Any) -> str:
    """Any torch-saveable object as text, for trainer_state.json."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def unpack(text: str) -> Any:
    return torch.load(io.BytesIO(base64.b64decode(text)), weights_only=False)


def _seeded(seed: int) -> dict:
    """Generator states seeded by `seed` (torch CPU, Python, numpy), leaving the current ones as they were."""
    import numpy as np

    saved = _global_states()
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    states = _global_states()
    _set_global_states(saved)
    return states


def _global_states() -> dict:
    import numpy as np

    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def _set_global_states(states: dict) -> None:
    import numpy as np

    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])


class SamplerOrder:
    """The prompt order a user's sampler gives, drawn lazily, with its own generator states (module doc)."""

    def __init__(self, sampler, num_rows: int, seed: int, key: str = KEY):
        from verl.experimental.dataset.sampler import AbstractCurriculumSampler

        self.sampler, self.num_rows, self.seed, self.key = sampler, num_rows, seed, key
        self.curriculum = isinstance(sampler, AbstractCurriculumSampler)
        self.stateful = callable(getattr(sampler, "state_dict", None)) and callable(
            getattr(sampler, "load_state_dict", None))
        self._iter = None
        self._at: tuple[int, int] = (-1, -1)  # (epoch, position) the iterator stands at
        self._rng: Optional[dict] = None  # the sampler's generator states (torch, python, numpy)
        self._restored = False  # a stateful sampler's state was just loaded: its next iterator continues it

    @classmethod
    def build(cls, data_cfg, rows: list[PromptRow], seed: int, batch_size: Optional[int] = None,
              max_response_length: Optional[int] = None, key: str = KEY) -> "SamplerOrder":
        from verl.data.real_data_config import real_data_config

        sampler_cls = load_sampler_class(data_cfg.sampler_class, key)
        config = real_data_config(data_cfg, seed=seed, batch_size=batch_size, max_response_length=max_response_length)
        rng = _seeded(seed)
        saved = _global_states()
        _set_global_states(rng)
        try:
            sampler = sampler_cls(data_source=SamplerRows(rows), data_config=config)
        except Exception as exc:  # noqa: BLE001 - the user's code: any failure is one line
            raise ConfigError(f"{key}: {sampler_cls.__name__}(data_source=..., data_config=...) failed: "
                              f"{type(exc).__name__}: {exc}") from exc
        finally:
            _set_global_states(saved)
        return cls(sampler, len(rows), seed, key)

    # ------------------------------------------------------------ drawing
    def _run(self, fn):
        """fn() with the sampler's generator states in place of the run's."""
        if self._rng is None:
            self._rng = _seeded(self.seed)
        saved = _global_states()
        _set_global_states(self._rng)
        try:
            return fn()
        finally:
            self._rng = _global_states()
            _set_global_states(saved)

    def _start(self, epoch: int, position: int) -> None:
        """A new iterator for `epoch`, standing at `position`: after a stateful sampler's load_state_dict, in
        its loaded state; otherwise from the epoch's seed, drawing `position` indices again."""
        restored, self._restored = self._restored, False
        if not restored:
            self._rng = _seeded((self.seed * 1_000_003 + epoch) % (2**63 - 1))
        self._iter = self._run(lambda: iter(self.sampler))
        self._at = (epoch, position if restored else 0)
        while self._at[1] < position:  # a sampler without state: draw again what was drawn before the save
            if self._draw(epoch) is None:
                raise DataError(f"{self.key}: on resume the sampler's epoch {epoch} ended after {self._at[1]} of the "
                                f"{position} indices drawn before the checkpoint; its order does not follow from "
                                f"the seed (give the sampler a state_dict)")

    def _draw(self, epoch: int) -> Optional[int]:
        try:
            value = self._run(lambda: next(self._iter))
        except StopIteration:
            return None
        try:
            index = operator.index(value.item() if isinstance(value, torch.Tensor) else value)
        except TypeError:
            raise DataError(f"{self.key}: the sampler yielded {value!r}, not a row index") from None
        if not 0 <= index < self.num_rows:
            raise DataError(f"{self.key}: the sampler yielded index {index}; the training data has {self.num_rows} "
                            f"rows (0..{self.num_rows - 1})")
        self._at = (epoch, self._at[1] + 1)
        return index

    def next(self, epoch: int, position: int) -> Optional[int]:
        """The row at `position` of epoch `epoch` (None: the epoch has ended)."""
        if self._iter is None or self._at != (epoch, position):
            self._start(epoch, position)
        index = self._draw(epoch)
        if index is None and position == 0:
            raise DataError(f"{self.key}: the sampler yielded no index for epoch {epoch}")
        return index

    # ------------------------------------------------------------ curriculum
    def update(self, batch, rows: list[int], step: int) -> None:
        """A curriculum sampler's update(batch) (real verl calls it after each step); others: nothing."""
        if not self.curriculum:
            return
        from verl.data.data_proto import DataProto

        proto = DataProto.from_batch(batch, rows, {"global_step": step})
        try:
            self._run(lambda: self.sampler.update(batch=proto))
        except Exception as exc:  # noqa: BLE001 - the user's code
            raise ConfigError(f"{self.key}: {type(self.sampler).__name__}.update(batch) failed: "
                              f"{type(exc).__name__}: {exc}") from exc

    # ------------------------------------------------------------ resume
    def state_dict(self) -> dict:
        if not self.stateful:
            return {"stateful": False}
        return {"stateful": True, "sampler": pack(self.sampler.state_dict()), "rng": pack(self._rng)}

    def load_state_dict(self, state: dict) -> None:
        """Before the loader's next draw; a stateful sampler continues from its own state (module doc)."""
        if not state.get("stateful"):
            return
        if not self.stateful:
            raise DataError(f"{self.key}: the checkpoint holds a sampler state, this sampler has no load_state_dict")
        self.sampler.load_state_dict(unpack(state["sampler"]))
        self._rng = unpack(state["rng"])
        self._iter, self._restored = None, True
