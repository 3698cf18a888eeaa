"""Where the roles run: one interface, one implementation per `distributed.backend`.

    backend = build_backend(config)                    # "none": this process; "ray": Ray worker groups
    roles = backend.build_roles(config, tokenizer, device, reward)
    roles.actor, roles.reference, roles.critic, roles.reward, roles.rollout
    backend.state_io                                   # the full-state checkpoint writer/reader it needs

The trainer calls the same methods on every backend's roles (verl/roles.py lists them)
and never asks which backend it has. Adding a backend: a Backend subclass in its own module and
one line in BACKENDS (the config takes `distributed.backend`'s choices from it).
"""

from __future__ import annotations

import importlib

BACKENDS = {
    "none": "verl.backends.local:LocalBackend",
    "ray": "verl.distributed.backend:RayBackend",
}


def build_backend(config):
    module, attr = BACKENDS[config.distributed.backend].split(":")
    return getattr(importlib.import_module(module), attr)()
