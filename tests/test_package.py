"""The package's shape: the import name is ``compactd`` (not python-daemon's ``daemon``), its public surface is
deliberate, and every internal module says what it offers the rest of the package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import compactd

PACKAGE = Path(compactd.__file__).resolve().parent


def test_the_import_package_is_compactd_under_daemon() -> None:
    assert PACKAGE.name == "compactd" and PACKAGE.parent.name == "daemon"
    assert not (PACKAGE.parent / "__init__.py").exists()  # `daemon` is a folder, not a package


def test_the_public_names_resolve_and_load_lazily() -> None:
    code = (
        "import sys, compactd\n"
        "assert not [m for m in sys.modules if m.startswith('compactd.')], sorted(sys.modules)\n"
        "for name in compactd.__all__:\n"
        "    assert getattr(compactd, name) is not None, name\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_python_dash_m_compactd_is_the_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "compactd", "--version"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.startswith("compactd "), proc.stderr


def test_every_module_is_private_or_lists_its_surface() -> None:
    lacking = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name.startswith("_") and path.name != "__init__.py":
            continue
        if path.name == "__init__.py" and not path.read_text(encoding="utf-8").strip().count("\n"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {
            t.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        defined = [
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and not node.name.startswith("_")
        ]
        if "__all__" not in names and defined:
            lacking.append(str(path.relative_to(PACKAGE)))
    assert not lacking, "modules that are neither private nor list __all__: " + ", ".join(lacking)
