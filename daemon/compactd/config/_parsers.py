"""The parsers of fields whose value is more than a bounded scalar (URLs, globs, commands, env names...).

Each is called as ``parse(value, ctx, path)`` and raises ``_Invalid`` (or records problems on ``ctx``) for a
bad value; the key itself is never echoed where it could be a pasted secret.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from compactd.config._env import _is_path_pattern, expand_user, resolve_state_dir
from compactd.config._validate import _Ctx, _describe, _empty_mapping, _Invalid, _kind, _string_list
from compactd.patterns import lazy_pattern
from compactd.roots import forbidden_root, literal_base

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

# A string hook command runs through this shell, so pipes and redirections work as the user expects.
HOOK_SHELL = ("/bin/sh", "-c")
# What an environment-variable name looks like; anything else was most likely the key itself, pasted.
_ENV_NAME = lazy_pattern(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _parse_roots(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> tuple[str, ...]:
    items = _string_list(value, ctx, path)
    if not items:
        raise _Invalid("expected at least one glob of session directories")
    roots = tuple(ctx.anchor(p) for p in items)
    for index, root in enumerate(roots):
        why = _forbidden_root_pattern(expand_user(root, ctx.env))
        if why is not None:
            ctx.add((*path, index), why)
    return roots


def _forbidden_root_pattern(pattern: str) -> str | None:
    """Why a root glob can never be used: its fixed part (before the first wildcard) is ``/`` or lies under
    ``/proc``, ``/sys`` or ``/dev``, as written or once resolved (compactd rewrites what it finds there)."""
    if not os.path.isabs(pattern):
        return None
    base = literal_base(os.path.normpath(pattern))
    for candidate in dict.fromkeys((base, os.path.realpath(base))):
        why = forbidden_root(candidate)
        if why is not None:
            what = (
                "a sessions root" if base == os.path.normpath(pattern) else f"the fixed part {base} of a glob"
            )
            return (
                f"{what} must not be / nor lie under /proc, /sys or /dev ({candidate}: {why}); "
                "name the directories that hold session files"
            )
    return None


def _parse_globs(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> tuple[str, ...]:
    return _string_list(value, ctx, path)


def _parse_workspaces(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> Mapping[str, str]:
    if value is None:
        return _empty_mapping()
    if not isinstance(value, Mapping):
        raise _Invalid(
            f"expected a mapping of agent id or sessions-dir glob to workspace path, got {_kind(value)}"
        )
    out: dict[str, str] = {}
    for key, target in value.items():
        sub = (*path, str(key))
        if not isinstance(key, str) or not key:
            ctx.add(sub, "expected a non-empty string key (an agent id or a sessions-dir glob)", at_key=True)
            continue
        if not isinstance(target, str) or not target:
            ctx.add(sub, f"expected a workspace directory path, got {_kind(target)}")
            continue
        out[ctx.anchor(key) if _is_path_pattern(key) else key] = ctx.anchor(target)
    return types.MappingProxyType(out)


def _parse_sections(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> tuple[str, ...]:
    return _string_list(value, ctx, path)


def _parse_command(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> tuple[str, ...]:
    if isinstance(value, str):
        if not value.strip():
            raise _Invalid("expected a non-empty command")
        return (*HOOK_SHELL, value)
    argv = _string_list(value, ctx, path)
    if not argv or not argv[0]:
        raise _Invalid("expected a non-empty argv list (or one string run by /bin/sh -c)")
    return argv


def _parse_base_url(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(
            f"expected an http(s) URL or null (no model: deterministic digest), got {_kind(value)}"
        )
    try:
        parts = urlsplit(value.strip())
        has_credentials = parts.username is not None or parts.password is not None
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise _Invalid("expected an http(s) URL such as http://127.0.0.1:11434/v1") from None
    if has_credentials:
        raise _Invalid("must not carry credentials; name them with summarizer.api_key_env or api_key_file")
    if not ok:
        raise _Invalid("expected an http(s) URL such as http://127.0.0.1:11434/v1")
    return value.strip()


def _parse_env_name(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> str | None:
    if value is None:
        return None
    # Never echo the value: a malformed "name" is most often the key itself.
    if not isinstance(value, str) or not _ENV_NAME().match(value):
        raise _Invalid(
            "expected the NAME of an environment variable (letters, digits, _), not the key itself"
        )
    return value


def _parse_key_file(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\n" in value:
        raise _Invalid("expected the path of a file holding the key, not the key itself")
    return ctx.anchor(value)


def _parse_num_ctx(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> bool | int:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value > 0:
        return value
    raise _Invalid(f"expected true, false or a positive integer (num_ctx to send), got {_describe(value)}")


# Ollama's keep_alive: a Go duration ("10m", "1h30m", "-1m"), "0", or a number of seconds (negative: forever).
_GO_DURATION = lazy_pattern(r"-?(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+\Z|0\Z")


def _parse_keep_alive(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> str | float | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _GO_DURATION().match(value.strip()):
        return value.strip()
    raise _Invalid(
        "expected a duration such as 5m, 1h or -1m, a number of seconds (negative keeps the model loaded), "
        f"or null (the server's OLLAMA_KEEP_ALIVE), got {_describe(value, echo=True)}"
    )


def _parse_state_dir(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> Path:
    if value is not None and (not isinstance(value, str) or not value):
        raise _Invalid(f"expected a directory path or null (systemd/XDG default), got {_kind(value)}")
    return resolve_state_dir(ctx.env, value, ctx.base_dir)


def _parse_log_level(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> str:
    choices = typing.get_args(LogLevel)
    if isinstance(value, str) and value.upper() in choices:
        return value.upper()
    raise _Invalid(f"expected one of {', '.join(choices)}, got {_describe(value, echo=True)}")


def _parse_metrics_textfile(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> Path | None:
    """An absolute ``*.prom`` path in an existing directory (node_exporter's textfile collector reads only
    ``*.prom``; the directory is its own, so compactd never creates it)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(
            f"expected an absolute path ending in .prom, or null (metrics.prom in state_dir), got {_kind(value)}"
        )
    target = Path(expand_user(value, ctx.env))
    if not target.is_absolute():
        raise _Invalid(f"expected an absolute path (node_exporter's textfile directory), got {value!r}")
    if target.suffix != ".prom" or target.name == ".prom":
        raise _Invalid(
            f"expected a file name ending in .prom (node_exporter reads only those), got {target.name!r}"
        )
    if not target.parent.is_dir():
        raise _Invalid(
            f"the directory {target.parent} does not exist (compactd writes the file, not its directory)"
        )
    return target


def _parse_http_listen(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> str | None:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6), or a bare port, which means 127.0.0.1 (port 0: any free one) : the endpoint is served to
    this machine unless the operator names another address."""
    if value is None:
        return None
    text = str(value).strip() if isinstance(value, int | str) and not isinstance(value, bool) else ""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if (
        not port.isdigit()
        or not 0 <= int(port) < 65536
        or (sep and not host)
        or any(c in host for c in "/ []")
    ):
        raise _Invalid(
            f"expected HOST:PORT (e.g. 127.0.0.1:9464) or a port, got {_describe(value, echo=True)}"
        )
    host = host or "127.0.0.1"
    return f"[{host}]:{int(port)}" if ":" in host else f"{host}:{int(port)}"
