"""OpenClaw's ``openclaw.json`` is read fast, bounded and only when it changed (issue 17, item 4).

Configs are written as real files in JSON5's styles (comments, unquoted keys, single quotes, trailing commas, hex
and signed numbers), from a value, so what each parses to is known; the ``json5`` package is the oracle that the
rendering is JSON5. Speed is in bench/bench_json5.py (a ratio to orjson), not here: the 1 MiB test's timeout only
stops a parser that would take a minute (the ``json5`` package took 55 s here, 115 s where it was reported).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import json5
import orjson
import pytest
from compactd.sources.openclaw import discover
from compactd.sources.openclaw._discovery import (
    MAX_CONFIG_DEPTH,
    OpenClawConfigError,
    read_openclaw_config,
)
from compactd.sources.openclaw._json5 import JSON5Error, loads
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.bench_json5 import big_config, render


@pytest.mark.timeout(20)
def test_a_1_mib_json5_config_parses_to_its_value(tmp_path: Path) -> None:
    value = big_config(1 << 20)
    text = render(value, style=1)
    assert len(text) >= 1 << 20 and ",// note\n}" in text and ",/* item */]" in text and "\n  id:" in text
    path = tmp_path / "openclaw.json"
    path.write_text(text)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)  # not plain JSON: the JSON5 parser reads it
    assert read_openclaw_config(str(path))[0] == value
    install = discover({}, state_dir=str(tmp_path), config_path=str(path))
    assert install.config_error is None and install.token == value["gateway"]["auth"]["token"]


@pytest.mark.parametrize("style", [0, 1])
def test_a_config_nested_deeper_than_the_limit_is_refused(tmp_path: Path, style: int) -> None:
    path = tmp_path / "openclaw.json"
    deep: Any = 1
    for _ in range(MAX_CONFIG_DEPTH):
        deep = [deep]
    path.write_text(render({"a": deep}, style=style))
    with pytest.raises(OpenClawConfigError, match=f"nested deeper than {MAX_CONFIG_DEPTH}"):
        read_openclaw_config(str(path))
    path.write_text(render({"a": deep[0]}, style=style))  # exactly the limit
    assert read_openclaw_config(str(path))[0] == {"a": deep[0]}


def test_a_config_nested_100000_deep_is_refused_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text("// deep\n{a: " + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(OpenClawConfigError, match="nested deeper than"):
        read_openclaw_config(str(path))
    install = discover({}, state_dir=str(tmp_path), config_path=str(path))
    assert install.config_error is not None and "nested deeper than" in install.config_error


def test_an_unchanged_config_is_not_parsed_again(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text("{gateway: {port: 1234}}")
    first = read_openclaw_config(str(path))[0]
    assert (
        read_openclaw_config(str(path))[0] is first
    )  # same (dev, ino, size, mtime_ns): the parsed value kept
    path.write_text("{gateway: {port: 12345}}")
    second = read_openclaw_config(str(path))[0]
    assert second == {"gateway": {"port": 12345}} and second is not first
    replacement = tmp_path / "new.json"
    replacement.write_text("{gateway: {port: 54321}}")
    os.utime(replacement, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))
    os.replace(replacement, path)  # another inode, whatever its size and mtime
    assert read_openclaw_config(str(path))[0] == {"gateway": {"port": 54321}}


def test_a_symlinked_or_special_config_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "openclaw.json"
    link.symlink_to(real)
    with pytest.raises(OpenClawConfigError, match=r"symlink|symbolic link"):
        read_openclaw_config(str(link))
    with pytest.raises(OpenClawConfigError, match=r"not a regular file.*\(a directory\)"):
        read_openclaw_config(str(tmp_path))


# --- the parser against values rendered in every JSON5 style ------------------------------------------------

_keys = st.one_of(
    st.from_regex(r"[A-Za-z_$][A-Za-z0-9_$]{0,8}", fullmatch=True),
    st.text(max_size=8),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=20),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(_keys, inner, max_size=5)),
    max_leaves=30,
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(_values, st.integers(min_value=0, max_value=3))
def test_json5_documents_parse_to_the_value_they_render(value: Any, style: int) -> None:
    text = render(value, style=style)
    assert _same(json5.loads(text), value)  # the rendering is JSON5 (the package's reading)
    assert _same(loads(text), value)


@pytest.mark.parametrize(
    "text",
    [
        "[1 2]",
        "{a:1,,}",
        "01",
        "'\\01'",
        "'\\1'",
        "{a}",
        "[",
        '"a\nb"',
        "nul",
        "[1,]]",
        "/* open",
        "{'a' 1}",
        "+",
    ],
)
def test_what_is_not_json5_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        json5.loads(text)
    with pytest.raises(JSON5Error):
        loads(text)
