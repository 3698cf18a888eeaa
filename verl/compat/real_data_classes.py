"""Real verl's user classes for data: data.custom_cls.path/.name (a dataset class) and
data.sampler.class_path/.class_name (a sampler) -> our data.dataset_class / data.sampler_class.

Real verl loads both with load_extern_object(path, name): `path` is a file (absolute, relative to the working
directory, or `file://...`) or `pkg://package.module` (`pkg://package/module` too). Ours is one
'where:Name' value: the file as given (~ expanded), or the module's dotted name.
"""

from __future__ import annotations

from verl.compat.real_keys import expand_path
from verl.errors import ConfigError


def class_spec(path, name, path_key: str, name_key: str) -> str:
    """Real verl's (path, name) as our 'where:Name'."""
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{path_key}: expected a file path or pkg://module, got {path!r}")
    if name is None or not str(name).strip():
        raise ConfigError(f"{name_key}: required with {path_key}={path} (the class's name there; real verl has "
                          f"no default)")
    if path.startswith("pkg://"):
        where = path[len("pkg://"):].replace("/", ".")
    else:
        where = expand_path(path[len("file://"):] if path.startswith("file://") else path)
    return f"{where}:{name}"


def dataset_class(value, ctx, key):
    if value is None:
        return {}
    return {"data.dataset_class": class_spec(value, ctx.get("data.custom_cls.name"), key, "data.custom_cls.name")}


def sampler_class(value, ctx, key):
    """Loaded now, so that a missing file or a class that is no AbstractSampler fails before any model loads
    (the dataset class is read with the rows, verl.compat.translate.Context.read_rows)."""
    if value is None:
        return {}
    from verl.data.custom_sampler import load_sampler_class

    spec = class_spec(value, ctx.get("data.sampler.class_name"), key, "data.sampler.class_name")
    load_sampler_class(spec, key)
    return {"data.sampler_class": spec}
