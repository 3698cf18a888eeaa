"""Compatibility with other projects' command lines.

`verl.compat.real_verl` holds the one table that translates real verl's (volcengine/verl,
PyPI `verl` 0.9.x) `main_ppo` overrides into this project's config; `verl.compat.translate`
applies it; `verl.trainer.main_ppo` is the entry point users type.
"""
