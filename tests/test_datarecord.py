"""``datarecord`` against ``dataclasses.dataclass``: the same class shapes give the same repr, equality, hash,
frozenness, slots and fields, for generated classes and values (the oracle is the standard library itself);
``rare`` ones are also made and copied alike."""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import math
from pathlib import Path
from typing import Any

import pytest
from compactd.datarecord import datarecord
from hypothesis import given, settings
from hypothesis import strategies as st

# Field values: hashable and not (a list), equal but distinct objects, NaN (equal to itself only by identity).
NAN = math.nan
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, -0.0, 1.5, NAN, math.inf]),
    st.text(max_size=3),
    st.tuples(st.integers(0, 2), st.text(max_size=2)),
)
values = st.one_of(scalars, st.lists(st.integers(0, 2), max_size=2))


@st.composite
def shapes(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    params = {
        "frozen": draw(st.booleans()),
        "slots": draw(st.booleans()),
        "eq": draw(st.booleans()),
        "repr": draw(st.booleans()),
        "rare": draw(st.booleans()),
    }
    fields = []
    for index in range(draw(st.integers(0, 4))):
        options = {
            "repr": draw(st.booleans()),
            "compare": draw(st.booleans()),
            "hash": draw(st.sampled_from([None, True, False])),
        }
        default = draw(st.sampled_from(["none", "value", "factory"]))
        if default == "value":
            options["default"] = draw(scalars)
        elif default == "factory":
            options["default_factory"] = list
        if default != "none" and draw(st.booleans()):
            options["init"] = False
        fields.append((f"f{index}", options))
    return params, fields


def twins(params: dict[str, Any], fields: list[tuple[str, dict[str, Any]]]) -> tuple[Any, Any]:
    """The same class body made twice, once by ``dataclass`` and once by ``datarecord`` (``rare`` is ours);
    each, the class or the exception its making raised."""
    standard = {key: value for key, value in params.items() if key != "rare"}

    def body() -> dict[str, Any]:
        namespace: dict[str, Any] = {"__annotations__": {name: "Any" for name, _ in fields}}
        namespace.update({name: dataclasses.field(**options) for name, options in fields})
        namespace["__module__"] = __name__
        namespace["__qualname__"] = "Shape"
        return namespace

    def made(decorate: Any) -> Any:
        try:
            return decorate(type("Shape", (), body()))
        except TypeError as exc:
            return exc

    return made(lambda cls: dataclasses.dataclass(cls, **standard)), made(datarecord(**params))


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return "value", call()
    except Exception as exc:
        return "raises", type(exc)


@settings(max_examples=400, deadline=None)
@given(shapes(), st.lists(st.lists(values, min_size=4, max_size=4), min_size=2, max_size=3))
def test_a_datarecord_behaves_as_the_dataclass(
    shape: tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]], rows: list[list[Any]]
) -> None:
    params, fields = shape
    made, ours = twins(params, fields)
    if isinstance(made, TypeError):  # a field without a default after one with: both refuse the class
        assert isinstance(ours, TypeError)
        return
    names = [name for name, _ in fields]
    init = [name for name, options in fields if options.get("init", True)]
    required = [name for name, options in fields if not {"default", "default_factory", "init"} & set(options)]
    assert [f.name for f in dataclasses.fields(ours)] == names
    assert ours.__match_args__ == made.__match_args__  # type: ignore[attr-defined]
    assert ours.__doc__ == made.__doc__  # the class body has none: dataclass's, from the signature
    if not params["rare"]:  # a rare class's ``__init__`` is generic: (*args, **kwargs)
        assert str(inspect.signature(ours)) == str(inspect.signature(made))
    assert ("__slots__" in ours.__dict__) == ("__slots__" in made.__dict__)
    assert (ours.__hash__ is None) == (made.__hash__ is None)
    # Made alike: every way of passing the arguments, and the wrong ones refused alike.
    row = rows[0]
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (tuple(row[: len(init)]), {}),
        (tuple(row[: len(required)]), {}),
        ((), dict(zip(init, row, strict=False))),
        ((), {name: row[0] for name in required}),
        ((*row[: len(init)], 0), {}),
        ((), {"nope": 1}),
        ((), {}),
        (tuple(row[:1]), {init[0]: 1} if init else {}),
    ]
    for args, kwargs in calls:
        ours_made, theirs_made = (
            outcome(lambda args=args, kwargs=kwargs: ours(*args, **kwargs)),
            outcome(lambda args=args, kwargs=kwargs: made(*args, **kwargs)),
        )
        assert ours_made[0] == theirs_made[0]
        if ours_made[0] == "raises":
            assert ours_made[1] is theirs_made[1] is TypeError
        else:
            assert repr(ours_made[1]).replace(hex(id(ours_made[1])), "") == repr(theirs_made[1]).replace(
                hex(id(theirs_made[1])), ""
            )
    theirs = [made(*row[: len(init)]) for row in rows]
    mine = [ours(*row[: len(init)]) for row in rows]
    for a, b in zip(theirs, mine, strict=True):
        assert repr(b).replace(hex(id(b)), "") == repr(a).replace(hex(id(a)), "")
        assert outcome(lambda b=b: hash(b))[0] == outcome(lambda a=a: hash(a))[0]
        if params["eq"] and params["frozen"] and outcome(lambda a=a: hash(a))[0] == "value":
            assert hash(b) == hash(a)  # the same tuple hashed
        for twin in (copy.copy(b), copy.deepcopy(b)):  # as pickle takes them apart and makes them again
            assert repr(twin).replace(hex(id(twin)), "") == repr(b).replace(hex(id(b)), "")
            if params["eq"]:
                assert outcome(lambda twin=twin, b=b: twin == b) == outcome(lambda a=a: copy.copy(a) == a)
        if init:
            changed = outcome(lambda b=b: dataclasses.replace(b, **{init[0]: 1}))
            assert changed[0] == outcome(lambda a=a: dataclasses.replace(a, **{init[0]: 1}))[0]
        if names:
            assert outcome(lambda b=b: setattr(b, names[0], 1)) == outcome(
                lambda a=a: setattr(a, names[0], 1)
            )
            assert outcome(lambda b=b: delattr(b, names[0])) == outcome(lambda a=a: delattr(a, names[0]))
    # Equality: between every pair (an object and itself included), and with a different class.
    theirs = [made(*row[: len(init)]) for row in rows]
    mine = [ours(*row[: len(init)]) for row in rows]
    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (mine[i] == mine[j]) == (theirs[i] == theirs[j])
            assert (mine[i] != mine[j]) == (theirs[i] != theirs[j])
        assert [mine[i] == theirs[i], theirs[i] == mine[i]] == [False, False]


def test_a_field_holding_its_own_object_repr_as_the_dataclass() -> None:
    made, ours = twins(
        {"frozen": False, "slots": False, "eq": True, "repr": True, "rare": False}, [("f0", {})]
    )
    a, b = made([]), ours([])
    a.f0.append(a)
    b.f0.append(b)
    assert repr(b) == repr(a) == "Shape(f0=[...])"


def test_a_method_the_class_defines_is_kept() -> None:
    @datarecord(frozen=True)
    class Own:
        value: int

        def __repr__(self) -> str:
            return "own"

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 7

    assert repr(Own(1)) == "own"
    assert Own(1) == Own(2)
    assert hash(Own(1)) == 7


def test_a_frozen_datarecord_refuses_assignment() -> None:
    @datarecord(frozen=True, slots=True)
    class Point:
        x: int
        y: int = 0

    point = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 2  # type: ignore[misc]
    assert dataclasses.replace(point, y=3) == Point(1, 3)
    assert {Point(1): "a"}[Point(1, 0)] == "a"
    assert not hasattr(point, "__dict__")


@pytest.mark.parametrize("rare", [False, True])
@pytest.mark.parametrize("frozen", [False, True])
def test_post_init_runs_after_the_fields_are_set(rare: bool, frozen: bool) -> None:
    seen: list[tuple[int, list[int]]] = []

    @datarecord(frozen=frozen, slots=True, rare=rare)
    class Counted:
        """A class with its own ``__post_init__``."""

        value: int
        items: list[int] = dataclasses.field(default_factory=list)

        def __post_init__(self) -> None:
            seen.append((self.value, self.items))

    Counted(1)
    Counted(2, [3])
    assert seen == [(1, []), (2, [3])]


def test_a_field_named_self() -> None:
    @datarecord(frozen=True)
    class Odd:
        """A field the ``__init__``'s first parameter's usual name."""

        self: int

    assert Odd(1).self == Odd(self=1).self == 1


def test_every_compactd_datarecord_has_its_own_docstring() -> None:
    """Else dataclass writes one from ``inspect.signature`` at every start: ~0.3 ms per class."""
    package = Path(__file__).resolve().parents[1] / "daemon" / "compactd"
    docless = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and ast.get_docstring(node) is None:
                for decorator in node.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    if isinstance(target, ast.Name) and target.id == "datarecord":
                        docless.append(f"{path.relative_to(package)}:{node.lineno} {node.name}")
    assert docless == []
