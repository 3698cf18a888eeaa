"""verl: reinforcement-learning post-training for language models.

    import verl
    trainer = verl.Trainer(model="tiny:gpt2", reward_funcs=[my_reward], train_dataset=ds, algorithm="grpo")
    trainer.train()

    from verl import load_config, create_trainer
    trainer = create_trainer(load_config("config.yaml"))
    metrics = trainer.step()
"""

from verl.version import __version__

def __getattr__(name):
    # Lazy re-exports keep `import verl` light (no torch import until needed).
    if name == "load_config":
        from verl.utils import load_config

        return load_config
    if name == "create_trainer":
        from verl.trainer import create_trainer

        return create_trainer
    if name == "Trainer":
        from verl.api import Trainer

        return Trainer
    if name == "Batch":
        from verl.batch import Batch

        return Batch
    raise AttributeError(f"module 'verl' has no attribute {name!r}")


__all__ = ["__version__", "load_config", "create_trainer", "Trainer", "Batch"]
