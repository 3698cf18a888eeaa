"""Loading a user's class named by a config key: `file.py:ClassName` or `package.module:ClassName`.

    cls = load_user_class("my_data.py:MyDataset", "data.dataset_class")

Used by data.dataset_class (verl.data.custom_dataset) and data.sampler_class (verl.data.custom_sampler).
A part before ':' that ends in .py, holds a path separator or names an existing file is a file (a relative
one is read from the working directory, as real verl's load_extern_object reads it); anything else is
imported as a module (real verl's `pkg://a.b.c` is written `a.b.c` here). Every failure is one
ConfigError naming the key.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys

from verl.errors import ConfigError


def split_spec(spec: str, key: str) -> tuple[str, str]:
    """('where', 'ClassName') of 'where:ClassName'."""
    if not isinstance(spec, str) or ":" not in spec or not spec.rsplit(":", 1)[1]:
        raise ConfigError(f"{key}: {spec!r} must look like 'path/to/file.py:ClassName' or 'package.module:ClassName'")
    where, name = spec.rsplit(":", 1)
    return where, name


def is_file(where: str) -> bool:
    return where.endswith(".py") or os.sep in where or "/" in where or os.path.exists(where)


def load_module(where: str, key: str):
    if is_file(where):
        path = os.path.abspath(os.path.expanduser(where))
        if not os.path.isfile(path):
            raise ConfigError(f"{key}: file '{where}' not found (looked at {path})")
        # One module per file, registered so that classes defined there pickle and their own imports resolve.
        mod_name = "verl_user_" + hashlib.sha1(path.encode()).hexdigest()[:12]
        if mod_name in sys.modules:
            return sys.modules[mod_name]
        file_spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(file_spec)
        sys.modules[mod_name] = module
        try:
            file_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[mod_name]
            raise ConfigError(f"{key}: importing '{where}' failed: {type(exc).__name__}: {exc}") from exc
        return module
    try:
        return importlib.import_module(where)
    except Exception as exc:  # noqa: BLE001 - ImportError, or an error raised by the module itself
        raise ConfigError(f"{key}: cannot import module '{where}': {type(exc).__name__}: {exc}") from exc


def load_user_class(spec: str, key: str, base: type, what: str) -> type:
    """The class `spec` names, checked to be a subclass of `base` (`what`: how the error names the base)."""
    where, name = split_spec(spec, key)
    module = load_module(where, key)
    cls = getattr(module, name, None)
    if cls is None:
        found = sorted(n for n, v in vars(module).items() if isinstance(v, type) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        raise ConfigError(f"{key}: '{where}' has no class '{name}' (classes defined there: {', '.join(found) or 'none'})")
    if not isinstance(cls, type) or not issubclass(cls, base):
        raise ConfigError(f"{key}: {name} from '{where}' is not a subclass of {what}")
    return cls
