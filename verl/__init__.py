"""verl: reinforcement-learning post-training for language models.

    from verl import load_config, create_trainer
    trainer = create_trainer(load_config("config.yaml"))
    metrics = trainer.step()
"""

import os as _os

from verl.version import __version__

# CPU tensors of 2 MiB and more on transparent huge pages (PyTorch's own switch, read once
# when torch first allocates, so it must be set before torch is imported). On a CPU step
# (smollm2-135m update, one thread) it cut page faults from ~430k to ~15k per update and
# the update ~10%. THP_MEM_ALLOC_ENABLE=0 in the environment turns it off.
_os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def __getattr__(name):
    # Lazy re-exports keep `import verl` light (no torch import until needed).
    if name == "load_config":
        from verl.utils import load_config

        return load_config
    if name == "create_trainer":
        from verl.trainer import create_trainer

        return create_trainer
    if name == "Batch":
        from verl.batch import Batch

        return Batch
    raise AttributeError(f"module 'verl' has no attribute {name!r}")


__all__ = ["__version__", "load_config", "create_trainer", "Batch"]
