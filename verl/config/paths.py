"""Relative paths in a config file are read from the file's folder first, then from the
working directory (docs/data.md, "Paths")."""

from __future__ import annotations

import os


# Keys that name files or model folders. In a config file, a relative path is read from the
# file's own folder first, then from the working directory (docs/data.md, "Paths"); overrides on
# the command line are relative to the working directory. checkpoint.save_dir is always relative
# to the working directory (outputs land where the command runs).
_PATH_KEYS = (("data", "train_files"), ("data", "val_files"), ("model", "name"), ("model", "tokenizer"),
              ("critic", "name"))


def _from_config_folder(value, base: str):
    """`value` made absolute against `base` when it names something there; else unchanged: a
    hub model name, the working-directory fallback, or a missing file (whose error then names
    the path as written)."""
    if not isinstance(value, str) or not value or os.path.isabs(value) or value.startswith(("tiny:", "~")):
        return value
    candidate = os.path.normpath(os.path.join(base, value))
    return candidate if os.path.exists(candidate) else value


def _function_from_config_folder(spec, base: str):
    """`reward_fn.function: file.py:name` with its file part resolved like _PATH_KEYS."""
    if not isinstance(spec, str) or ":" not in spec:
        return spec
    file_part, name = spec.rsplit(":", 1)
    if not file_part.endswith(".py"):
        return spec  # module:function, imported by name
    return f"{_from_config_folder(file_part, base)}:{name}"


def resolve_relative_paths(data: dict, base: str) -> dict:
    """A config file's relative paths (_PATH_KEYS, reward_fn.function and .model_name, also in
    combined components, data.dataset_class and data.sampler_class) resolved against its folder `base`, in
    place."""
    for section, key in _PATH_KEYS:
        node = data.get(section)
        if not isinstance(node, dict) or key not in node:
            continue
        value = node[key]
        node[key] = ([_from_config_folder(v, base) for v in value] if isinstance(value, list)
                     else _from_config_folder(value, base))
    if isinstance(data.get("data"), dict):  # user classes named as file.py:Name
        for key in ("dataset_class", "sampler_class"):
            if key in data["data"]:
                data["data"][key] = _function_from_config_folder(data["data"][key], base)
    rewards = [data.get("reward_fn")] if isinstance(data.get("reward_fn"), dict) else []
    while rewards:
        rf = rewards.pop()
        if "function" in rf:
            rf["function"] = _function_from_config_folder(rf["function"], base)
        if isinstance(rf.get("model_name"), str):
            rf["model_name"] = _from_config_folder(rf["model_name"], base)
        rewards += [c for c in rf.get("components") or [] if isinstance(c, dict)]
    return data
