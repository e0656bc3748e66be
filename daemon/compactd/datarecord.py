"""``datarecord``: ``dataclasses.dataclass`` with ``__repr__``, ``__eq__`` and ``__hash__`` built without compiling.

``dataclass`` writes each method it adds as source text and compiles it, at every start of every process:
six compilations for a frozen class, about 0.8 ms of CPU, which for the hundred-odd classes of compactd is a
tenth of a ``once --dry-run``. Its ``__init__`` and a frozen class's ``__setattr__``/``__delattr__`` are worth
compiling (each depends on the fields in ways a generic function would pay for at every call); its
``__repr__``, ``__eq__`` and ``__hash__`` are not: the same behaviour comes from a C ``attrgetter`` over the
fields, made when the class is. ``tests/test_datarecord.py`` holds the two to the same results.
"""

from __future__ import annotations

import dataclasses
from _thread import get_ident
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["datarecord"]

T = TypeVar("T", bound=type)


@overload
def datarecord(cls: T, /) -> T: ...


@overload
def datarecord(
    *, frozen: bool = False, slots: bool = False, eq: bool = True, repr: bool = True
) -> Callable[[T], T]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def datarecord(
    cls: T | None = None, /, *, frozen: bool = False, slots: bool = False, eq: bool = True, repr: bool = True
) -> T | Callable[[T], T]:
    """``@dataclass(frozen=..., slots=..., eq=..., repr=...)``: the same class, fields and behaviour."""

    def wrap(cls: T) -> T:
        return _finish(cls, frozen=frozen, slots=slots, eq=eq, repr=repr)

    return wrap if cls is None else wrap(cls)


def _finish(cls: T, *, frozen: bool, slots: bool, eq: bool, repr: bool) -> T:
    own = cls.__dict__
    keep_repr, keep_eq = "__repr__" in own, "__eq__" in own
    # As dataclass tells it: a ``__hash__`` the class body set itself, not the None that defining ``__eq__``
    # implies.
    class_hash = own.get("__hash__", dataclasses.MISSING)
    explicit_hash = not (class_hash is dataclasses.MISSING or (class_hash is None and "__eq__" in own))
    made: Any = dataclasses.dataclass(cls, frozen=frozen, slots=slots, eq=False, repr=False)
    fields = dataclasses.fields(made)
    if repr and not keep_repr:
        made.__repr__ = _repr([f.name for f in fields if f.repr], made.__qualname__)
    if eq:
        if not keep_eq:
            made.__eq__ = _eq(_values([f.name for f in fields if f.compare]), made.__qualname__)
        if not explicit_hash:  # dataclass's table for eq without unsafe_hash
            made.__hash__ = (
                _hash(_values([f.name for f in fields if (f.compare if f.hash is None else f.hash)]))
                if frozen
                else None
            )
    return made  # type: ignore[no-any-return]


def _values(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple dataclass compares and hashes, ``(self.a, self.b)``, whatever the number of fields."""
    if not names:
        return lambda _: ()
    if len(names) == 1:
        name = names[0]
        return lambda obj: (getattr(obj, name),)
    return attrgetter(*names)


def _repr(names: list[str], qualname: str) -> Callable[[Any], str]:
    running: set[tuple[int, int]] = set()

    def __repr__(self: Any) -> str:
        key = (id(self), get_ident())
        if key in running:  # as dataclass's: a field that holds the object itself
            return "..."
        running.add(key)
        try:
            inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        finally:
            running.discard(key)
        return f"{self.__class__.__qualname__}({inner})"

    __repr__.__qualname__ = f"{qualname}.__repr__"
    return __repr__


def _eq(values: Callable[[Any], tuple[Any, ...]], qualname: str) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    __eq__.__qualname__ = f"{qualname}.__eq__"
    return __eq__


def _hash(values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    return lambda self: hash(values(self))
