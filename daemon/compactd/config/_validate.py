"""Validation with positions: every problem of a file is collected, with its line, column and dotted key.

Generic over the schema: :class:`_Ctx` builds any frozen dataclass from a mapping, using each field's type
hint and the rules :func:`_opt` stores in its metadata (bounds, or a parser), and records a
:class:`ConfigProblem` for everything wrong instead of stopping at the first.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, cast

from compactd.datarecord import datarecord
from compactd.patterns import lazy_pattern

_PLAIN_KEY = lazy_pattern(r"[A-Za-z0-9_-]+\Z")

# --- errors -------------------------------------------------------------------------------------------------


@datarecord(frozen=True, slots=True, rare=True)
class ConfigProblem:
    """One thing wrong with a configuration; ``key`` is the dotted path ("" for the document itself)."""

    key: str
    message: str
    line: int | None = None
    column: int | None = None

    def format(self, source: str) -> str:
        where = source if self.line is None else f"{source}:{self.line}:{self.column}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class ConfigError(Exception):
    """An unusable configuration; ``str()`` lists every problem as ``file:line:col: dotted.key: expected``."""

    def __init__(self, source: str, problems: list[ConfigProblem] | tuple[ConfigProblem, ...]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__("\n".join(p.format(source) for p in self.problems))

    @property
    def key(self) -> str:
        """Dotted key of the first problem."""
        return self.problems[0].key if self.problems else ""


class _Invalid(Exception):
    """Raised by a field parser; turned into a ConfigProblem at the field's path."""


# --- field metadata -----------------------------------------------------------------------------------------

_Parser = Callable[[Any, "_Ctx", tuple[str | int, ...]], Any]


def _opt(
    default: Any = dataclasses.MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    parse: _Parser | None = None,
    resolve_absent: bool = False,
    compare: bool = True,
    show: bool = True,
) -> Any:
    """A dataclass field with its validation rules: bounds, or a custom parser (called with None when the key
    is absent if ``resolve_absent``, for values resolved at load time such as the state directory)."""
    meta = {"ge": ge, "gt": gt, "le": le, "parse": parse, "resolve_absent": resolve_absent}
    if factory is not None:
        return field(default_factory=factory, metadata=meta, compare=compare, repr=show)
    return field(default=default, metadata=meta, compare=compare, repr=show)


def _empty_mapping() -> Mapping[str, Any]:
    return types.MappingProxyType({})


# --- the validating builder ---------------------------------------------------------------------------------


# What an error message calls a value of each type; bool before int, since a bool is an int.
_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (type(None), "null"),
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a number"),
    (str, "a string"),
    (list, "a list"),
    (Mapping, "a mapping"),
)


def _kind(value: Any) -> str:
    for kinds, name in _KINDS:
        if isinstance(value, kinds):
            return name
    return f"a {type(value).__name__}"


def _describe(value: Any, *, echo: bool = False) -> str:
    """A bad value for an error message: numbers and booleans shown, strings only where ``echo`` allows."""
    if isinstance(value, bool) or value is None:
        return _kind(value) if value is None else f"{str(value).lower()}"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str) and echo:
        shown = value if len(value) <= 40 else value[:37] + "..."
        return repr(shown)
    return _kind(value)


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY().match(part):
            out += f".{part}" if out else part
        else:
            out += f'["{part}"]'
    return out


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower().replace("-", "_")


def _string_list(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _Invalid(f"expected a list of strings, got {_kind(value)}")
    out: list[str] = []
    for index, item in enumerate(value):
        if isinstance(item, str) and item:
            out.append(item)
        else:
            ctx.add((*path, index), f"expected a non-empty string, got {_kind(item)}")
    return tuple(out)


@datarecord(rare=True)
class _Ctx:
    """One validation's context: where the text came from, the environment, and the problems found so far."""

    source: str
    env: Mapping[str, str]
    base_dir: Path
    marks: Mapping[tuple[str | int, ...], tuple[int, int]]
    problems: list[ConfigProblem] = field(default_factory=list)
    explicit_reserve: bool = False
    explicit_state_dir: bool = False

    def add(self, path: tuple[str | int, ...], message: str, *, at_key: bool = False) -> None:
        mark = self.marks.get(("key", *path)) if at_key else None
        probe = path
        while mark is None and probe:  # the nearest enclosing key that has a position
            mark, probe = self.marks.get(probe), probe[:-1]
        line, column = mark if mark else (None, None)
        self.problems.append(ConfigProblem(_dotted(path), message, line, column))

    def anchor(self, path: str) -> str:
        """A relative path is relative to the configuration file's directory; ``~`` is kept for later."""
        if path.startswith("~") or os.path.isabs(path):
            return path
        return str(self.base_dir / path)

    def mapping_of(self, value: Any, path: tuple[str | int, ...], cls: type[Any]) -> Mapping[str, Any]:
        if value is None:
            return _empty_mapping()
        if not isinstance(value, Mapping):
            raise _Invalid(f"expected a mapping of names to {cls.__name__} settings, got {_kind(value)}")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key:
                self.add((*path, str(key)), "expected a string name (quote it)", at_key=True)
                continue
            built = self.dataclass_of(cls, item, (*path, key))
            if built is not None:
                out[key] = built
        return types.MappingProxyType(out)

    def dataclass_of(self, cls: type[Any], value: Any, path: tuple[str | int, ...]) -> Any:
        """Build ``cls`` from a mapping, recording every problem; None when anything in it is wrong."""
        if value is None:
            value = {}  # an empty group ("compaction:" with every child commented out) means its defaults
        if not isinstance(value, Mapping):
            self.add(path, f"expected a mapping, got {_kind(value)}")
            return None
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name != "source"}
        ok = True
        for key in value:
            if not isinstance(key, str) or key not in fields:
                self._unknown(key, path, list(fields))
                ok = False
        kwargs: dict[str, Any] = {}
        for name, spec in fields.items():
            sub = (*path, name)
            try:
                if name in value:
                    kwargs[name] = self._value(value[name], hints[name], spec.metadata, sub)
                elif spec.metadata.get("resolve_absent"):
                    kwargs[name] = spec.metadata["parse"](None, self, sub)
                elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                    raise _Invalid("required key is missing")
            except _Quiet:
                ok = False
            except _Invalid as exc:
                self.add(sub, str(exc))
                ok = False
        if not ok:
            return None
        return cls(**kwargs)

    def _unknown(self, key: Any, path: tuple[str | int, ...], valid: list[str]) -> None:
        import difflib  # here: only an unknown key needs it (with heapq, about 1 ms of every command's start)

        name = str(key)
        close = difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
        if _snake(name) in valid and _snake(name) not in close:
            close.insert(0, _snake(name))
        hint = f"did you mean {' or '.join(close)}?" if close else f"valid keys: {', '.join(valid)}"
        self.add((*path, name), f"unknown key; {hint}", at_key=True)

    def _value(self, value: Any, hint: Any, meta: Mapping[str, Any], path: tuple[str | int, ...]) -> Any:
        parser = meta.get("parse")
        if parser is not None:
            return parser(value, self, path)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (types.UnionType, typing.Union) and type(None) in args:
            if value is None:
                return None
            (hint,) = [a for a in args if a is not type(None)]
            origin, args = typing.get_origin(hint), typing.get_args(hint)
        if dataclasses.is_dataclass(hint):
            built = self.dataclass_of(cast(type[Any], hint), value, path)
            if built is None:
                raise _Quiet
            return built
        if origin is Literal:
            if value in args:
                return value
            raise _Invalid(f"expected one of {', '.join(map(str, args))}, got {_describe(value, echo=True)}")
        if hint is bool:
            if isinstance(value, bool):
                return value
            raise _Invalid(f"expected true or false, got {_describe(value)}")
        if hint is int:
            if not isinstance(value, int) or isinstance(value, bool):
                raise _Invalid(f"expected an integer, got {_describe(value)}")
            return self._bounded(value, meta, "an integer")
        if hint is float:
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise _Invalid(f"expected a number, got {_describe(value)}")
            if not math.isfinite(value):
                raise _Invalid(f"expected a finite number, got {_describe(value)}")
            if meta.get("ge") is not None or meta.get("gt") is not None or meta.get("le") is not None:
                self._bounded(value, meta, "a number")
            return float(value)
        if hint is str:
            if isinstance(value, str) and value.strip():
                return value
            raise _Invalid(f"expected a non-empty string, got {_kind(value)}")
        raise AssertionError(f"no validator for {hint!r}")  # pragma: no cover - a schema bug, not bad input

    @staticmethod
    def _bounded(value: float, meta: Mapping[str, Any], kind: str) -> Any:
        ge, gt, le = meta.get("ge"), meta.get("gt"), meta.get("le")
        if (
            (gt is not None and not value > gt)
            or (ge is not None and not value >= ge)
            or (le is not None and not value <= le)
        ):
            raise _Invalid(f"expected {_range_text(kind, ge, gt, le)}, got {value!r}")
        return value


def _range_text(kind: str, ge: float | None, gt: float | None, le: float | None) -> str:
    """'an integer from 0 to 12', 'a number above 0 and at most 1', 'a positive integer', ..."""
    if le is not None:
        if ge is not None:
            return f"{kind} from {ge:g} to {le:g}"
        return f"{kind} above {gt:g} and at most {le:g}" if gt is not None else f"{kind} of at most {le:g}"
    if gt is not None:
        return f"a positive {kind.split()[-1]}" if gt == 0 else f"{kind} above {gt:g}"
    return f"{kind} of 0 or more" if ge == 0 else f"{kind} of at least {ge:g}"


class _Quiet(_Invalid):
    """A nested group already recorded its own problems."""
