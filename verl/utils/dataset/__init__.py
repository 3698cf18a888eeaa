"""Real verl's `verl.utils.dataset` import path: `from verl.utils.dataset import RLHFDataset` (our own class with
real verl's interface; see rl_dataset.py)."""

from verl.utils.dataset.rl_dataset import RLHFDataset

__all__ = ["RLHFDataset"]
