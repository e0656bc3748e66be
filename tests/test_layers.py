"""The package's shape (docs/design.md §3): a pure core that does no I/O, layers that import downwards only, no
cycle between packages, a service that knows no particular source, and sources registered in one place.

Read from the source with ``ast`` (runtime imports only: those under ``if TYPE_CHECKING:`` are for annotations,
and every module has ``from __future__ import annotations``), so a violation is named with its module and line.
"""

from __future__ import annotations

import ast
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "daemon" / "compactd"

# What the core may import from outside itself: pure standard-library modules, orjson, and the defaults.
CORE_ALLOWED = {
    "__future__",
    "array",  # flat spans of a lean reading (reader.Spans); no file is read or written through it
    "bisect",  # a lean reading's entry of a line number (reader._depth_problems_owed)
    "collections",
    "collections.abc",
    "contextlib",  # core.collector's context manager
    "dataclasses",
    "compactd.datarecord",  # dataclasses.dataclass, with generic methods; it does no I/O
    "compactd.patterns",  # regular expressions compiled on first use
    "datetime",
    "enum",
    "functools",
    "gc",
    "hashlib",
    "itertools",
    "json",
    "json.decoder",
    "logging",
    "math",
    "orjson",
    "re",
    "sys",
    "time",
    "typing",
    "unicodedata",
    "compactd.defaults",
}
# Builtins and attributes that reach a file, a process, a socket or a thread.
IO_NAMES = {"open", "input", "print"}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the imported module, dotted
    line: int


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _imports(path: Path) -> list[Import]:
    module = _module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [Import(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(Import(module, node.module, node.lineno))
            if node.module == "compactd":  # ``from compactd import offload``: the module named
                out += [Import(module, f"compactd.{alias.name}", node.lineno) for alias in node.names]
    return out


ALL = sorted(PACKAGE.rglob("*.py"))
IMPORTS = [i for path in ALL for i in _imports(path)]


def _node(module: str) -> str:
    """The unit the layering is about: ``compactd.x`` for a top-level module or package."""
    return ".".join(module.split(".")[:2])


def test_the_core_imports_nothing_that_does_io() -> None:
    bad = [
        f"{i.module}:{i.line} imports {i.target}"
        for i in IMPORTS
        if i.module.startswith("compactd.core")
        and not i.target.startswith("compactd.core")
        and i.target not in CORE_ALLOWED
    ]
    assert not bad, "the core must stay pure:\n" + "\n".join(bad)


def test_the_core_calls_nothing_that_does_io() -> None:
    bad = []
    for path in sorted((PACKAGE / "core").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_NAMES:
                bad.append(f"{_module_name(path)}:{node.lineno} calls {node.func.id}()")
    assert not bad, "\n".join(bad)


def test_no_cycle_between_packages() -> None:
    """Between ``compactd.*`` top-level modules and packages, imports form a DAG (a cycle inside one package
    is that package's own business)."""
    edges: dict[str, dict[str, Import]] = {}
    for i in IMPORTS:
        if not i.target.startswith("compactd."):
            continue
        a, b = _node(i.module), _node(i.target)
        if a != b:
            edges.setdefault(a, {}).setdefault(b, i)
    state: dict[str, int] = {}  # 1 visiting, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in edges.get(node, {}):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for start in sorted(edges):
        if start not in state and (cycle := visit(start)) is not None:
            shown = [
                f"{a} -> {b} ({edges[a][b].module}:{edges[a][b].line})" for a, b in itertools.pairwise(cycle)
            ]
            pytest.fail("import cycle between packages:\n" + "\n".join(shown))


@pytest.mark.parametrize(
    ("layer", "must_not_import"),
    [
        # the core is imported by everything and imports none of them
        (
            "compactd.core",
            (
                "compactd.sources",
                "compactd.commands",
                "compactd.service",
                "compactd.commit",
                "compactd.summarize",
                "compactd.state",
                "compactd.memory",
            ),
        ),
        # the edges know no source, no command and no service
        ("compactd.commit", ("compactd.sources", "compactd.commands", "compactd.service")),
        ("compactd.summarize", ("compactd.sources", "compactd.commands", "compactd.service")),
        ("compactd.memory", ("compactd.sources", "compactd.commands", "compactd.service")),
        ("compactd.state", ("compactd.sources", "compactd.commands", "compactd.service")),
        # sources do not reach up to the service or the commands
        ("compactd.sources", ("compactd.commands", "compactd.service")),
        # the service runs sources through the protocol: no particular source by name
        (
            "compactd.service",
            (
                "compactd.sources.files",
                "compactd.sources.openclaw",
                "compactd.sources.codex",
                "compactd.commands",
            ),
        ),
    ],
)
def test_layers_import_downwards_only(layer: str, must_not_import: tuple[str, ...]) -> None:
    bad = [
        f"{i.module}:{i.line} imports {i.target}"
        for i in IMPORTS
        if (i.module == layer or i.module.startswith(layer + "."))
        and any(i.target == m or i.target.startswith(m + ".") for m in must_not_import)
    ]
    assert not bad, "\n".join(bad)


def test_every_source_package_is_registered_and_builds_a_source() -> None:
    """A new agent is one package under ``compactd/sources/`` exposing ``build(host)``, named once in
    ``SOURCES``; each builds an object with the protocol's face."""
    from compactd.config import Config
    from compactd.sources import SOURCES, Host, Source, build_sources
    from compactd.state import Metrics

    packages = {p.name for p in (PACKAGE / "sources").iterdir() if (p / "__init__.py").exists()}
    assert {module.rsplit(".", 1)[1] for module, _ in SOURCES} == packages
    host = Host(Config.defaults(), {}, Metrics())
    sources = build_sources(host)
    assert [s.name for s in sources] == ["jsonl", "openclaw-sqlite", "codex"]
    protocol = {name for name in dir(Source) if not name.startswith("_")}
    for source in sources:
        missing = {name for name in protocol if not hasattr(source, name)}
        assert not missing, f"{source.name} lacks {sorted(missing)}"
    assert [s.name for s in build_sources(host, files_only=True)] == ["jsonl"]
