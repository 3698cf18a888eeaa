"""Compatibility with other projects' command lines.

`verl.compat.real_verl` holds the one table that translates real verl's (volcengine/verl,
PyPI `verl` 0.9.x) `main_ppo` overrides into this project's config, with its reward rows in
`real_rewards`; `translate` applies it (with `config_file` for --config-path/--config-name
YAMLs, and `real_verl_defaults.yaml` for real verl's keys outside the table);
`verl.trainer.main_ppo` is the entry point users type. Real verl's own example scripts (their
arguments, and the harness that runs them) are outside the package, in the repository's
tools/real_verl_scripts/.
"""
