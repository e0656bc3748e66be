"""The configuration's plain reader (:mod:`compactd.config._plain`) against PyYAML: for every document it reads, the
same values (types included), the same line and column for every key path, the same duplicate keys; every other
document (PyYAML's errors included) is left to PyYAML."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from compactd.config import ConfigError, _load
from compactd.config._plain import read_plain

REPO = Path(__file__).resolve().parents[1]


def typed(value: Any) -> Any:
    """``value`` with every scalar's type beside it: ``1``, ``1.0`` and ``True`` are equal, but not the same."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


def by_pyyaml(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...] | str:
    with monkeypatch.context() as m:
        m.setattr(_load, "read_plain", lambda _text: None)
        try:
            data, marks, problems = _load._parse_yaml(text, "c.yaml")
        except ConfigError as exc:
            return f"error: {exc}"
    return typed(data), marks, problems


def same_as_pyyaml(text: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    """True when the plain reader read ``text`` (as PyYAML does), False when it left it to PyYAML."""
    plain = read_plain(text)
    if plain is None:
        return False
    ours = _load._parse_yaml(text, "c.yaml")
    assert (typed(ours[0]), ours[1], ours[2]) == by_pyyaml(text, monkeypatch), text
    return True


READ = [
    "",
    "# only a comment\n\n",
    "state_dir: /tmp/s\n",
    'sessions:\n  roots: ["/tmp/bc/corpus"]\nstate_dir: /tmp/bc/state\n',
    "a: 1\nb: -2\nc: 0\nd: 1.5\ne: -0.0\nf: 00.5\ng: 12345678901234567890\n",
    "a: yes\nb: No\nc: TRUE\nd: off\ne: On\nf: y\ng: n\nh: null\ni: ~\nj: Null\nk: nothing\n",
    "a:\nb:   # a comment\nc: x\n",
    "a:\n  b:\n    c: 1\n  d: 2\ne: 3\n",
    "roots:\n  - ~/.pi/agent/sessions/*\n  - /x/y\n  -   spaced\nnext: 1\n",
    "roots:\n- a\n- 'b c'\n- \"d # e\"\nnext: 1\n",
    "a: [1, 'x', \"y\", a b, -3, 2.5, null, yes]  # trailing\nb: []\nc: [ ]\nd: {}\ne: { }\n",
    "a: 1\na: 2\nb:\n  c: 1\n  c: 2\nb:\n  d: 3\n",
    "a: 1\n\n   \n# c\n  # indented comment\nb: 2",
    "base_url: http://localhost:11434/v1\nkey: a:b\nlist: a, b\nword: Session Startup  \n",
    "k_1: v\nk-2: v\nk.3: v\nK: v\n_k: v\n",
    "a: 'it is'\nb: \"it's\"\nc: 'say \"hi\"'\n",
]

LEFT = [
    "a: 010\n",  # octal in YAML 1.1
    "a: 1e3\n",
    "a: 1_000\n",
    "a: 1:30\n",
    "a: 2024-01-01\n",
    "a: .5\n",
    "a: .inf\n",
    "a: +1\n",
    "a: 'it''s'\n",
    'a: "tab\\t"\n',
    "a: &x 1\nb: *x\n",
    "a: !!str 1\n",
    "a: |\n  text\n",
    "a: >\n  text\n",
    "yes: 1\n",
    "1: a\n",
    '"a b": 1\n',
    "a:\n  b: 1\n c: 2\n",  # a dedent to no level
    "a: 1\n  b: 2\n",
    "a: x\n  continued\n",
    "a:\tb\n",
    "a: b\r\n",
    "a: é\n",
    "---\na: 1\n",
    "a: [1, 2\n",
    "a: [1, ]\n",
    "a: [[1]]\n",
    "a: {b: 1}\n",
    "a:\n  - b: 1\n",
    "a:\n  -\n    - x\n",
    "a: b: c\n",
    "a: b#c\n",
    "a:b\n",
    "  a: 1\n",
    "<<: {}\n",
    "a: @x\n",
    "a: 'x' y\n",
    "- a\n",
    "plain\n",
]


@pytest.mark.parametrize("text", READ)
def test_the_plain_reader_reads_as_pyyaml_does(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert same_as_pyyaml(text, monkeypatch)


@pytest.mark.parametrize("text", LEFT)
def test_anything_else_is_left_to_pyyaml(text: str) -> None:
    assert read_plain(text) is None


def test_the_example_configuration_and_a_deep_one(monkeypatch: pytest.MonkeyPatch) -> None:
    assert same_as_pyyaml((REPO / "config.example.yaml").read_text(), monkeypatch)
    deep = "".join(f"{' ' * (2 * i)}k{i}:\n" for i in range(40)) + f"{' ' * 80}v: 1\n"
    assert read_plain(deep) is None  # deeper than any configuration: PyYAML's, and its limits


SCALARS = [
    "1", "-2", "0", "07", "1.5", "-0.5", "1.", ".5", "1e3", "1_0", "yes", "No", "off", "~", "null", "Null",
    "nULL", "word", "two words", "/p/*/x", "~/p", "http://h:1/v", "a:b", "a: b", "a #c", "a#c", "'s'",
    "\"d\"", "'i''t'", "\"e\\n\"", "&x 1", "*x", "!t 1", "|", "[]", "[1, a]", "[1,]", "['x', \"y\"]", "{}",
    "{a: 1}", "-", "2024-01-01", "x:", "# c", "+1", "-x", "=", "@x", "%x", "y", "n", "a , b", "(x)",
]  # fmt: skip
GOOD_SCALARS = [
    "1", "-2", "0", "1.5", "-0.5", "yes", "No", "off", "~", "null", "word", "two words", "/p/*/x", "~/p",
    "http://h:1/v", "a:b", "'s'", "\"d\"", "[]", "[1, a]", "['x', \"y\"]", "{}", "y", "a , b", "1 # c",
]  # fmt: skip
KEYS = ["a", "b", "c", "k_1", "x.y", "K-2"]
BAD_KEYS = ["on", "null", "1", "'q'", "a b", "<<", "-a"]


def _chaos(rng: random.Random) -> str:
    """Lines of any kind, in any order and indentation: mostly not a document read here."""
    lines = []
    for _ in range(rng.randint(1, 8)):
        indent = " " * rng.choice([0, 0, 0, 2, 2, 4, 1, 3])
        kind = rng.random()
        if kind < 0.6:
            value = rng.choice([*SCALARS, ""])
            lines.append(f"{indent}{rng.choice(KEYS + BAD_KEYS)}:{' ' if value else ''}{value}")
        elif kind < 0.8:
            lines.append(f"{indent}- {rng.choice(SCALARS)}")
        elif kind < 0.9:
            lines.append(rng.choice(["", "# c", "  # c", "---", "\ta: 1", "a: 1\r"]))
        else:
            lines.append(f"{indent}{rng.choice(SCALARS)}")
    return "\n".join(lines) + rng.choice(["\n", ""])


def _mapping(rng: random.Random, indent: int, depth: int, lines: list[str]) -> None:
    step = rng.choice([2, 2, 4, 1])
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(KEYS)
        shape = rng.random()
        if shape < 0.55 or depth > 3:
            value = rng.choice(GOOD_SCALARS)
            lines.append(
                f"{' ' * indent}{key}:{rng.choice([' ', '  '])}{value}{rng.choice(['', ' # c', '  '])}"
            )
        elif shape < 0.7:
            lines.append(f"{' ' * indent}{key}:{rng.choice(['', ' # c', '  '])}")
        elif shape < 0.85:
            lines.append(f"{' ' * indent}{key}:")
            at = indent + rng.choice([0, step])
            for _ in range(rng.randint(1, 3)):
                lines.append(f"{' ' * at}-{rng.choice([' ', '  '])}{rng.choice(GOOD_SCALARS)}")
        else:
            lines.append(f"{' ' * indent}{key}:")
            _mapping(rng, indent + step, depth + 1, lines)
        if rng.random() < 0.15:
            lines.append(rng.choice(["", "# c", " " * rng.randint(0, 6) + "# c", "   "]))


def _document(rng: random.Random) -> str:
    """A document of the shape read here, now and then with one line or one value of another."""
    if rng.random() < 0.25:
        return _chaos(rng)
    lines: list[str] = []
    _mapping(rng, 0, 0, lines)
    if rng.random() < 0.3:
        at = rng.randrange(len(lines) + 1)
        indent = " " * rng.choice([0, 1, 2, 4])
        bad = rng.choice(
            [
                f"{indent}{rng.choice(BAD_KEYS + KEYS)}: {rng.choice(SCALARS)}",
                f"{indent}- {rng.choice(SCALARS)}",
                f"{indent}{rng.choice(SCALARS)}",
            ]
        )
        lines.insert(at, bad)
    return "\n".join(lines) + rng.choice(["\n", ""])


def test_random_documents_read_as_pyyaml_does_or_are_left_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(22)
    read = sum(same_as_pyyaml(_document(rng), monkeypatch) for _ in range(4000))
    assert read > 1000  # the comparison is not vacuous: the plain reader did read many of them
