"""Compatibility with other projects' command lines.

`verl.compat.real_verl` holds the one table that translates real verl's (volcengine/verl,
PyPI `verl` 0.9.x) `main_ppo` overrides into this project's config, with its reward rows in
`real_rewards`; `translate` applies it (with `config_file` for --config-path/--config-name
YAMLs, and `real_verl_defaults.yaml` for real verl's keys outside the table);
`verl.trainer.main_ppo` is the entry point users type. `example_scripts.txt` holds the
arguments of real verl's own example scripts, run by `verl.trainer.example_scripts`.
"""
