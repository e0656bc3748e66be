"""``datarecord``: ``dataclasses.dataclass`` with one compilation per class at most.

``dataclass`` writes each method it adds as source text and compiles it, at every start of every process:
six compilations for a frozen class, about 0.8 ms of CPU, which for the hundred-odd classes of compactd is a
tenth of a ``once --dry-run``. Only ``__init__`` is worth compiling (binding the arguments by name in a
generic function costs microseconds at every call); it is written here as dataclass writes it. A frozen
class's ``__setattr__``/``__delattr__`` (called only to refuse), ``__repr__``, ``__eq__`` and ``__hash__``
are generic: the last three over a C ``attrgetter`` of the fields, made when the class is. dataclass itself
only gathers the fields and makes the slots. ``tests/test_datarecord.py`` holds the two to the same results.

A class made a few times per process (the configuration's) is better off with no compilation at all:
``rare=True`` gives it a generic ``__init__`` too.

A class without a docstring gets dataclass's, from its signature: ``inspect.signature`` costs about 0.3 ms per
class, so compactd's classes each have their own (``tests/test_datarecord.py`` checks).
"""

from __future__ import annotations

import dataclasses
from _thread import get_ident
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["datarecord"]

T = TypeVar("T", bound=type)


class _Factory:
    """The default an ``__init__`` parameter with a default factory shows (as dataclass's own sentinel)."""

    def __repr__(self) -> str:
        return "<factory>"


_HAS_DEFAULT_FACTORY = _Factory()


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
    keep_repr, keep_eq, keep_init = "__repr__" in own, "__eq__" in own, "__init__" in own
    # As dataclass tells it: a ``__hash__`` the class body set itself, not the None that defining ``__eq__``
    # implies.
    class_hash = own.get("__hash__", dataclasses.MISSING)
    explicit_hash = not (class_hash is dataclasses.MISSING or (class_hash is None and "__eq__" in own))
    # dataclass writes a missing docstring from the signature, which is ours only once ``__init__`` is made.
    docless = not cls.__doc__
    if docless:
        cls.__doc__ = cls.__name__
    made: Any = dataclasses.dataclass(cls, init=False, frozen=False, slots=slots, eq=False, repr=False)
    fields = dataclasses.fields(made)
    if not keep_init:
        made.__init__ = (_init if rare else _compiled_init)(made, fields, frozen=frozen, slots=slots)
    if frozen:
        made.__setattr__, made.__delattr__ = _frozen(made, {f.name for f in fields})
        if slots and "__getstate__" not in own:  # as dataclass does, for pickle and copy: they would assign
            # the slots one by one
            made.__getstate__, made.__setstate__ = _slots_state([f.name for f in fields])
    if docless:
        made.__doc__ = made.__name__ + _text_signature(made, fields, own_init=keep_init)
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


def _compiled_init(
    cls: Any, fields: tuple[dataclasses.Field[Any], ...], *, frozen: bool, slots: bool
) -> Callable[..., None]:
    """dataclass's ``__init__``, written and compiled as dataclass writes it (one compilation): a class made
    often gets plain assignments, or, frozen, ``object.__setattr__``, instead of a generic binding."""
    self_name = "__dataclass_self__" if "self" in {f.name for f in fields} else "self"
    namespace: dict[str, Any] = {
        "_HAS_DEFAULT_FACTORY": _HAS_DEFAULT_FACTORY,
        "_object_setattr": object.__setattr__,
    }
    params: list[str] = []
    lines: list[str] = []
    for f in fields:
        default = f"__dataclass_dflt_{f.name}__"
        if f.default_factory is not dataclasses.MISSING:
            namespace[default] = f.default_factory
            param, value = (
                f"{f.name}=_HAS_DEFAULT_FACTORY",
                f"{default}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}",
            )
            if not f.init:
                value = f"{default}()"
        elif f.default is not dataclasses.MISSING:
            namespace[default] = f.default
            param, value = f"{f.name}={default}", f.name if f.init else default
            if not (f.init or slots):  # read from the class attribute holding the default: nothing to assign
                continue
        else:
            param = value = f.name
            if not f.init:  # never set by ``__init__``
                continue
            if params and "=" in params[-1]:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")  # as dataclass
        if f.init:
            params.append(param)
        lines.append(
            f"_object_setattr({self_name}, {f.name!r}, {value})"
            if frozen
            else f"{self_name}.{f.name} = {value}"
        )
    if hasattr(cls, "__post_init__"):
        lines.append(f"{self_name}.__post_init__()")
    source = f"def __init__({', '.join([self_name, *params])}):\n " + "\n ".join(lines or ["pass"])
    exec(source, namespace)  # our own text, of the class's field names
    init: Callable[..., None] = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**{f.name: f.type for f in fields if f.init}, "return": None}
    return init


def _text_signature(cls: Any, fields: tuple[dataclasses.Field[Any], ...], *, own_init: bool) -> str:
    """What dataclass appends to a class's name to make its missing docstring: its ``__init__``'s signature
    (a generic one's told from the fields, as dataclass would have written it)."""
    import inspect  # dataclasses has loaded it

    if own_init:
        try:
            return str(inspect.signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            return ""
    empty, kind = inspect.Parameter.empty, inspect.Parameter.POSITIONAL_OR_KEYWORD
    return str(
        inspect.Signature(
            [
                inspect.Parameter(
                    f.name,
                    kind,
                    annotation=f.type,
                    default=_HAS_DEFAULT_FACTORY
                    if f.default_factory is not dataclasses.MISSING
                    else empty
                    if f.default is dataclasses.MISSING
                    else f.default,
                )
                for f in fields
                if f.init
            ]
        )
    )


def _init(
    cls: Any, fields: tuple[dataclasses.Field[Any], ...], *, frozen: bool, slots: bool
) -> Callable[..., None]:
    """dataclass's ``__init__`` for a class made a few times (``rare``): the ``init`` fields by position or
    name, in order, each else its default or its factory's value; the others their default or factory's, if
    any; then ``__post_init__``, if any. Nothing compiled."""
    qualname = cls.__qualname__
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
