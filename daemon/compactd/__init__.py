"""compactd: keeps agents' session transcripts inside their context windows, from outside the agents.

The public surface is the ``compactd`` command and the few names below: the configuration (``load_config``,
``Config``, ``ConfigError``), the service (``Service``, ``run_service``, ``run_once``) and the command's entry
point (``main``). They load on first use, so ``import compactd`` (and every ``python -m compactd`` command)
pays only for what it runs. Every other module is internal: private modules are named ``_x.py``, and each
other module lists what it offers the rest of the package in its ``__all__`` (design.md §3).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = [
    "Config",
    "ConfigError",
    "Service",
    "__version__",
    "load_config",
    "main",
    "run_once",
    "run_service",
]

_PUBLIC = {
    "Config": "compactd.config",
    "ConfigError": "compactd.config",
    "load_config": "compactd.config",
    "Service": "compactd.service",
    "run_service": "compactd.service",
    "run_once": "compactd.service",
    "main": "compactd.commands.cli",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'compactd' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
