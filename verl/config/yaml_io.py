"""Reading config YAML: files and `key.path=value` overrides, with errors that name the file,
the line or the override at fault (missing, a folder, not UTF-8, malformed, a key given twice)."""

from __future__ import annotations

import os

import yaml

from verl.errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error naming
    both lines (plain PyYAML keeps the last silently: `total_steps: 2` then `total_steps: 1`,
    or a second `training:` section replacing the first)."""

    source = "config"

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # an unhashable key: let PyYAML's own error name it
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(f"{self.source}: key '{key}' appears twice in one section (lines {seen[key]} and "
                                  f"{line}); keep one of them")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str) -> dict:
    """Read a YAML config file. Every way it can be unreadable becomes one ConfigError naming
    the file (and the line and column where YAML knows them): missing, a folder, not UTF-8,
    malformed, a key given twice, a top level that is not a mapping."""
    if os.path.isdir(path):
        raise ConfigError(f"{path}: is a folder, not a config file (give the path of a .yaml file)")
    if not os.path.exists(path):
        raise ConfigError(f"config file not found: {path}")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                          f"{exc.start}); save the file as UTF-8") from None
    loader = _UniqueKeyLoader(text)
    loader.source = path
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: malformed YAML{where}: {problem}") from None
    finally:
        loader.dispose()
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def set_dotted(data: dict, dotted: str, raw: str) -> None:
    """Apply one `a.b.c=value` override to a nested dict (value parsed as YAML)."""
    keys = dotted.split(".")
    node = data
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override '{dotted}': '{k}' is not a section")
    if raw == "":
        node[keys[-1]] = ""
        return
    loader = _UniqueKeyLoader(raw)
    loader.source = f"override '{dotted}'"
    try:
        node[keys[-1]] = loader.get_single_data()
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"override '{dotted}={raw}': the value is not valid YAML ({problem})") from None
    finally:
        loader.dispose()


def parse_overrides(overrides: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like key.path=value")
        key, raw = item.split("=", 1)
        pairs.append((key.strip(), raw))
    return pairs
