"""Real verl's sampler interfaces, for user samplers written against them (data.sampler_class).

    from verl.experimental.dataset.sampler import AbstractCurriculumSampler   # as in real verl

    class MySampler(AbstractCurriculumSampler):
        def __init__(self, data_source, data_config): ...   # data_source: the training rows (Sized)
        def __iter__(self): ...                              # row indices, in the order to train on
        def __len__(self): ...
        def update(self, batch): ...                         # after every training step

Our package is named `verl` too, so such a sampler imports this module. verl.data.custom_sampler builds the
sampler, draws the prompt order from it and calls a curriculum sampler's `update(batch)` after each step.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sized

from torch.utils.data import Sampler

__all__ = ["AbstractSampler", "AbstractCurriculumSampler"]


class AbstractSampler(Sampler[int]):
    """A sampler built as cls(data_source=rows, data_config=real verl's data config)."""

    @abstractmethod
    def __init__(self, data_source: Sized, data_config):
        pass


class AbstractCurriculumSampler(AbstractSampler):
    """A sampler told about each finished step: update(batch), batch a DataProto view of the step's samples."""

    @abstractmethod
    def update(self, batch) -> None:
        pass
