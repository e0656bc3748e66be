"""The environment of a timed child process: compactd as an installed package runs.

``pip install`` compiles a package's modules to bytecode, and the standard library and the dependencies ship
theirs; a machine with ``PYTHONDONTWRITEBYTECODE`` set (this one) would otherwise have every child compile
compactd's source again at every start, a cost no installed daemon or command pays."""

from __future__ import annotations

import compileall
import os
from pathlib import Path

DAEMON = Path(__file__).resolve().parents[1] / "daemon"


def installed_env(
    *, pythonpath: str | os.PathLike[str] | None = None, drop: tuple[str, ...] = ()
) -> dict[str, str]:
    """This process's environment with bytecode caches read and written, without ``drop``'s variables;
    ``pythonpath``: another tree's package (a baseline) first on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", *drop)}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def compile_package(tree: str | os.PathLike[str] | None = None) -> None:
    """Compile a tree's ``compactd`` package in place (``__pycache__``, as pip does at install): ours, or the
    baseline's ``daemon`` directory."""
    compileall.compile_dir(str(Path(tree or DAEMON) / "compactd"), quiet=1)
