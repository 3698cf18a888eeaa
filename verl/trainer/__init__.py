"""Seed-compatible entry points: `from verl.trainer import create_trainer`.

The names are loaded on first use, so that `python3 -m verl.trainer.main_ppo` (a module of this
package) answers a bad key in a fraction of a second instead of importing torch first."""


def __getattr__(name):
    if name in ("Trainer", "create_trainer"):
        from verl.trainer import trainer as _trainer

        return getattr(_trainer, name)
    raise AttributeError(f"module 'verl.trainer' has no attribute {name!r}")


__all__ = ["Trainer", "create_trainer"]
