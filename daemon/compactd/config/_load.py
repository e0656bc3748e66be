"""Loading: the YAML file read within bounds, every key's line and column, and the validated build.

Only :class:`ConfigError` leaves here: a YAML error is reported from its parts (never ``str(exc)``, which
quotes the offending line, which may hold a secret).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from compactd.config._checks import _check_across
from compactd.config._env import CONFIG_MAX_BYTES, _Refused, read_small_file
from compactd.config._plain import read_plain
from compactd.config._schema import Config
from compactd.config._validate import ConfigError, ConfigProblem, _Ctx, _dotted, _kind
from compactd.pi_settings import pi_agent_dir, read_pi_compaction

if TYPE_CHECKING:
    import yaml


def _build(
    data: Any,
    source: str,
    env: Mapping[str, str] | None,
    base_dir: str | Path | None,
    marks: Mapping[tuple[str | int, ...], tuple[int, int]],
    problems: list[ConfigProblem],
) -> Config:
    ctx = _Ctx(
        source=source,
        env=os.environ if env is None else env,
        base_dir=Path(base_dir) if base_dir is not None else Path.cwd(),
        marks=marks,
        problems=list(problems),
    )
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        ctx.add((), f"expected a mapping at the top level, got {_kind(data)}")
        raise ConfigError(source, ctx.problems)
    compaction = data.get("compaction")
    ctx.explicit_reserve = isinstance(compaction, Mapping) and "reserve_tokens" in compaction
    ctx.explicit_state_dir = data.get("state_dir") is not None
    config = ctx.dataclass_of(Config, data, ())
    if config is not None and not ctx.problems:
        _check_across(config, ctx)
    if ctx.problems or config is None:
        raise ConfigError(
            source, sorted(ctx.problems, key=lambda p: (p.line is None, p.line or 0, p.column or 0))
        )
    config = cast(Config, dataclasses.replace(config, source=source))
    if config.pi.use_settings:  # pi's own thresholds, read once per loaded configuration (design.md §6.14)
        agent_dir = Path(config.pi.agent_dir).expanduser() if config.pi.agent_dir else pi_agent_dir(ctx.env)
        object.__setattr__(config.pi, "settings", read_pi_compaction(agent_dir))
    return config


_DUPLICATE = "duplicate key (a later value would silently win)"


def _collect_marks(
    node: yaml.Node,
    path: tuple[str | int, ...],
    marks: dict[tuple[str | int, ...], tuple[int, int]],
    problems: list[ConfigProblem],
    seen: set[int],
) -> None:
    """Map every key path to its line/column, and report duplicate keys (PyYAML silently keeps the last)."""
    import yaml

    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            sub = (*path, key)
            marks[sub] = (value_node.start_mark.line + 1, value_node.start_mark.column + 1)
            marks[("key", *sub)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key in keys and key != "<<":
                mark = key_node.start_mark
                problems.append(
                    ConfigProblem(
                        _dotted(sub),
                        _DUPLICATE,
                        mark.line + 1,
                        mark.column + 1,
                    )
                )
            keys.add(key)
            _collect_marks(value_node, sub, marks, problems, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            marks[(*path, index)] = (item.start_mark.line + 1, item.start_mark.column + 1)
            _collect_marks(item, (*path, index), marks, problems, seen)


def _parse_yaml(
    text: str, source: str
) -> tuple[Any, dict[tuple[str | int, ...], tuple[int, int]], list[ConfigProblem]]:
    """The document, the position of every key path, and the duplicate keys (reported with the rest).

    yaml is imported here, not with the module, and only for a file of another shape than :mod:`._plain` reads
    (nested ``key: value`` lines): its import (about 15 ms) would otherwise be paid by every command."""
    plain = read_plain(text)
    if plain is not None:
        document, positions, duplicates = plain
        return (
            document,
            positions,
            [ConfigProblem(_dotted(k), _DUPLICATE, ln, col) for k, ln, col in duplicates],
        )
    import yaml

    marks: dict[tuple[str | int, ...], tuple[int, int]] = {}
    problems: list[ConfigProblem] = []
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None, marks, problems
        _collect_marks(node, (), marks, problems, set())
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        # Built from the parts, never str(exc): that quotes the offending line, which may hold a secret.
        mark = exc.problem_mark or exc.context_mark
        what = "; ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise ConfigError(source, [ConfigProblem("", f"YAML syntax error: {what}", line, column)]) from None
    except yaml.reader.ReaderError as exc:
        position = max(0, min(exc.position, len(text)))
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        message = f"YAML syntax error: character #x{exc.character:04x} is not allowed ({exc.reason})"
        raise ConfigError(source, [ConfigProblem("", message, line, column)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, [ConfigProblem("", f"YAML error: {type(exc).__name__}")]) from None
    except RecursionError:
        raise ConfigError(source, [ConfigProblem("", "YAML nested too deeply")]) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # PyYAML lets some constructor errors through unwrapped (e.g. a timestamp with month 13).
        raise ConfigError(source, [ConfigProblem("", f"invalid YAML value ({type(exc).__name__})")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, marks, problems


def load_config(path: str | os.PathLike[str] | None, *, env: Mapping[str, str] | None = None) -> Config:
    """Load and validate a YAML file; ``None`` gives the built-in defaults. Raises only ConfigError.

    The file must be a regular file of at most ``CONFIG_MAX_BYTES`` (1 MiB).
    """
    if path is None:
        return Config.defaults(env)
    source = str(path)
    try:
        text = read_small_file(path, CONFIG_MAX_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(source, [ConfigProblem("", "cannot read configuration: not UTF-8 text")]) from None
    except _Refused as exc:
        raise ConfigError(source, [ConfigProblem("", f"cannot read configuration: {exc}")]) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(source, [ConfigProblem("", f"cannot read configuration: {reason}")]) from None
    data, marks, problems = _parse_yaml(text, source)
    base_dir = Path(os.path.abspath(path)).parent
    try:
        return _build(data, source, env, base_dir, marks, problems)
    except RecursionError:
        raise ConfigError(source, [ConfigProblem("", "YAML nested too deeply")]) from None
