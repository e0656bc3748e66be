"""``datarecord``: ``dataclasses.dataclass`` with ``__repr__``, ``__eq__`` and ``__hash__`` built without compiling.

``dataclass`` writes each method it adds as source text and compiles it, at every start of every process:
six compilations for a frozen class, about 0.8 ms of CPU, which for the hundred-odd classes of compactd is a
tenth of a ``once --dry-run``. Its ``__init__`` and a frozen class's ``__setattr__``/``__delattr__`` are worth
compiling (each depends on the fields in ways a generic function would pay for at every call); its
``__repr__``, ``__eq__`` and ``__hash__`` are not: the same behaviour comes from a C ``attrgetter`` over the
fields, made when the class is. ``tests/test_datarecord.py`` holds the two to the same results.

A class made a few times per process (the configuration's) is better off with no compilation at all:
``rare=True`` gives it a generic ``__init__`` (binding its arguments by name costs microseconds per instance)
and, frozen, generic ``__setattr__``/``__delattr__``.
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
    *, frozen: bool = False, slots: bool = False, eq: bool = True, repr: bool = True, rare: bool = False
) -> Callable[[T], T]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def datarecord(
    cls: T | None = None,
    /,
    *,
    frozen: bool = False,
    slots: bool = False,
    eq: bool = True,
    repr: bool = True,
    rare: bool = False,
) -> T | Callable[[T], T]:
    """``@dataclass(frozen=..., slots=..., eq=..., repr=...)``: the same class, fields and behaviour.
    ``rare``: nothing compiled (see the module's docstring)."""

    def wrap(cls: T) -> T:
        return _finish(cls, frozen=frozen, slots=slots, eq=eq, repr=repr, rare=rare)

    return wrap if cls is None else wrap(cls)


def _finish(cls: T, *, frozen: bool, slots: bool, eq: bool, repr: bool, rare: bool) -> T:
    own = cls.__dict__
    keep_repr, keep_eq = "__repr__" in own, "__eq__" in own
    # As dataclass tells it: a ``__hash__`` the class body set itself, not the None that defining ``__eq__``
    # implies.
    class_hash = own.get("__hash__", dataclasses.MISSING)
    explicit_hash = not (class_hash is dataclasses.MISSING or (class_hash is None and "__eq__" in own))
    made: Any = dataclasses.dataclass(
        cls, init=not rare, frozen=frozen and not rare, slots=slots, eq=False, repr=False
    )
    fields = dataclasses.fields(made)
    if rare:
        if "__init__" not in own:
            made.__init__ = _init(fields, made.__qualname__, frozen=frozen)
        if frozen:
            made.__setattr__, made.__delattr__ = _frozen(made, {f.name for f in fields})
            if slots:  # as dataclass does, for pickle and copy: they would assign the slots one by one
                made.__getstate__, made.__setstate__ = _slots_state([f.name for f in fields])
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


def _init(fields: tuple[dataclasses.Field[Any], ...], qualname: str, *, frozen: bool) -> Callable[..., None]:
    """dataclass's ``__init__``: the ``init`` fields by position or name, in order, each else its default or
    its factory's value; the others their default or factory's, if any; then ``__post_init__``, if any."""
    params = [f for f in fields if f.init]
    names = [f.name for f in params]
    has_default = [
        f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING for f in params
    ]
    if True in has_default and not all(has_default[has_default.index(True) :]):
        raise TypeError(f"{qualname}: a field without a default follows one with a default")  # as dataclass
    known = frozenset(names)
    rest = [f for f in fields if not f.init]
    put = object.__setattr__ if frozen else setattr

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{qualname}.__init__() takes {len(names) + 1} positional arguments")
        for name in kwargs:
            if name not in known:
                raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {name!r}")
        for name in names[: len(args)]:
            if name in kwargs:
                raise TypeError(f"{qualname}.__init__() got multiple values for argument {name!r}")
        values = dict(zip(names, args, strict=False))
        values.update(kwargs)
        for f in params:
            if f.name not in values:
                if f.default is not dataclasses.MISSING:
                    values[f.name] = f.default
                elif f.default_factory is not dataclasses.MISSING:
                    values[f.name] = f.default_factory()
                else:
                    raise TypeError(f"{qualname}.__init__() missing required argument {f.name!r}")
        for f in params:
            put(self, f.name, values[f.name])
        for f in rest:
            if f.default is not dataclasses.MISSING:
                put(self, f.name, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                put(self, f.name, f.default_factory())
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()

    __init__.__qualname__ = f"{qualname}.__init__"
    return __init__


def _frozen(cls: Any, names: set[str]) -> tuple[Callable[[Any, str, Any], None], Callable[[Any, str], None]]:
    """dataclass's frozen ``__setattr__`` and ``__delattr__``: a field is never assigned nor deleted once
    made (``__init__`` sets them with ``object.__setattr__``)."""

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


def _slots_state(names: list[str]) -> tuple[Callable[[Any], list[Any]], Callable[[Any, list[Any]], None]]:
    def __getstate__(self: Any) -> list[Any]:
        return [getattr(self, name) for name in names]

    def __setstate__(self: Any, state: list[Any]) -> None:
        for name, value in zip(names, state, strict=True):
            object.__setattr__(self, name, value)

    return __getstate__, __setstate__
