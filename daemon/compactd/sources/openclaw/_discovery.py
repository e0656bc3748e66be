"""Where a 2026.9+ OpenClaw install keeps its agents, and what its own config says about them.

Nothing here needs compactd configuration: ``$OPENCLAW_STATE_DIR`` (default ``~/.openclaw``) holds
``agents/<id>/agent/openclaw-agent.sqlite``; ``$OPENCLAW_CONFIG_PATH`` (default ``<state>/openclaw.json``) is
JSON5, because OpenClaw itself parses it with JSON5 (comments, trailing commas, unquoted keys, single quotes): a
stricter reader would refuse configs the gateway runs with. It is read as plain JSON by orjson when it is that,
else by :mod:`compactd.sources.openclaw._json5` (linear, depth-bounded), and only when it changed: ``compactd run`` looks at
it every rescan. The gateway token is a secret: it is registered with the log scrubber as soon as it is read.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import stat
import threading
from collections.abc import Mapping
from dataclasses import field
from typing import Any

import orjson

from compactd.datarecord import datarecord
from compactd.defaults import DEFAULT_CONTEXT_TOKENS
from compactd.sources.openclaw._claim import agent_refusal, identity_for, owner_of
from compactd.sources.openclaw._guard import database_of, is_sqlite_agent
from compactd.workspace import Identity

log = logging.getLogger(__name__)

DEFAULT_GATEWAY_PORT = 18789
MAX_PORT = 65535
TOKEN_ENV = "OPENCLAW_GATEWAY_TOKEN"
# An OpenClaw config larger than this is not read (it is a few KiB in practice), nor one nested deeper.
MAX_CONFIG_BYTES = 4 << 20
MAX_CONFIG_DEPTH = 64


class OpenClawConfigError(Exception):
    """OpenClaw's config exists but cannot be used (unreadable, not JSON5, not an object)."""


@datarecord(frozen=True, slots=True)
class Agent:
    """An OpenClaw agent found on this host: its directory, database, workspace and model."""

    agent_id: str
    agent_dir: str
    database: str
    workspace: str
    context_window: int
    model: str | None  # "provider/model" as configured, for the operator
    owner: int  # the agent directory's owner: every file of the agent is that user's (_claim)
    identity: Identity | None = field(default=None, repr=False)  # whom to read as (None: compactd itself)


@datarecord(frozen=True, slots=True)
class Install:
    """One OpenClaw state directory as compactd sees it."""

    state_dir: str
    config_path: str
    port: int
    token: str | None = field(repr=False)
    agents: tuple[Agent, ...]
    jsonl_agents: tuple[str, ...]  # agent dirs without a database: served by their files (≤ 2026.7)
    config_error: str | None = None
    # The gateway's user, who owns the state directory it writes: the token goes to its sockets only.
    gateway_uid: int | None = None
    refused: tuple[tuple[str, str], ...] = ()  # (agent dir, why): a database that is not its owner's own

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


def state_dir_from(env: Mapping[str, str], configured: str | None = None) -> str:
    """``openclaw.state_dir`` in compactd's config, else ``$OPENCLAW_STATE_DIR``, else ``~/.openclaw``."""
    chosen = (
        configured
        or env.get("OPENCLAW_STATE_DIR")
        or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".openclaw")
    )
    return os.path.abspath(os.path.expanduser(chosen))


# The last config read from each path: the file's (dev, ino, size, mtime_ns), its owner and its value.
_parsed: dict[str, tuple[tuple[int, int, int, int], int, dict[str, Any]]] = {}
_parsed_lock = threading.Lock()


def read_openclaw_config(path: str) -> tuple[dict[str, Any], int | None]:
    """OpenClaw's JSON5 config as a dict and its owner ({} and None when the file does not exist); the same
    dict, unparsed again, while the file's (dev, ino, size, mtime_ns) is unchanged (callers must not modify it).

    It is a claim like the agents' files (:mod:`compactd.sources.openclaw._claim`): a regular file of its owner, not a
    symlink, opened as its owner when compactd is root, non-blocking (a FIFO cannot hang discovery, and with it
    ``once`` and ``run``'s shutdown) and checked on the open descriptor; at most ``MAX_CONFIG_BYTES + 1`` bytes
    are read."""
    from compactd.config import file_kind
    from compactd.fs_identity import files_as

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise OpenClawConfigError(f"cannot stat {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        raise OpenClawConfigError(f"{path} is a symlink")
    try:
        with files_as(identity_for(info.st_uid, info.st_gid)):
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OpenClawConfigError(f"{path} is a symbolic link, not read") from None
        raise OpenClawConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != info.st_uid:
            kind = file_kind(st.st_mode)
            raise OpenClawConfigError(f"{path} is not a regular file of uid {info.st_uid} ({kind})")
        if st.st_size > MAX_CONFIG_BYTES:
            raise OpenClawConfigError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes")
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        cached = _parsed.get(path)
        if cached is not None and cached[0] == key:
            return cached[2], cached[1]
        raw = _read_at_most(fd, MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise OpenClawConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_CONFIG_BYTES:
        raise OpenClawConfigError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes")
    value = parse_config(raw, path)
    with _parsed_lock:
        _parsed[path] = (key, st.st_uid, value)
    return value, st.st_uid


def _read_at_most(fd: int, limit: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < limit:
        chunk = os.read(fd, limit - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def parse_config(raw: bytes, path: str = "openclaw.json") -> dict[str, Any]:
    """The config's object: orjson when the bytes are plain JSON (nearly always), else JSON5; either way no
    deeper than :data:`MAX_CONFIG_DEPTH`."""
    from compactd.sources.openclaw._json5 import loads

    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            value = loads(raw.decode("utf-8"), max_depth=MAX_CONFIG_DEPTH)
        except (ValueError, UnicodeDecodeError) as exc:
            raise OpenClawConfigError(f"{path} is not JSON5: {exc}") from None
    else:
        if _depth_exceeds(value, MAX_CONFIG_DEPTH):
            raise OpenClawConfigError(f"{path} is not JSON5: nested deeper than {MAX_CONFIG_DEPTH}")
    if not isinstance(value, dict):
        raise OpenClawConfigError(f"{path} does not hold an object")
    return value


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether containers nest deeper than ``limit``, level by level (orjson accepts 1024 levels)."""
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            below.extend(
                c for c in (item.values() if isinstance(item, dict) else item) if isinstance(c, dict | list)
            )
        level = below
    return False


def _dig(doc: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def _positive_int(value: Any, limit: int | None = None) -> int | None:
    """A positive whole figure from the config; None for anything else (``Infinity``, ``NaN``, over ``limit``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        return None
    number = int(value)
    return number if number > 0 and (limit is None or number <= limit) else None


def context_window(doc: Mapping[str, Any], model_ref: str | None) -> int:
    """The ``contextWindow`` of ``provider/model`` under ``models.providers``, capped by
    ``agents.defaults.contextTokens``; OpenClaw's default window when it is not configured."""
    window = None
    if model_ref and "/" in model_ref:
        provider, model_id = model_ref.split("/", 1)
        models = _dig(doc, "models", "providers", provider, "models")
        for entry in models if isinstance(models, list) else []:
            if isinstance(entry, dict) and entry.get("id") == model_id:
                window = _positive_int(entry.get("contextWindow"))
                break
    window = window or DEFAULT_CONTEXT_TOKENS
    cap = _positive_int(_dig(doc, "agents", "defaults", "contextTokens"))
    return min(window, cap) if cap else window


def _model_ref(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    primary = _dig(value, "primary")
    return primary if isinstance(primary, str) and primary else None


def _agent_entries(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    entries = _dig(doc, "agents", "list")
    out: dict[str, dict[str, Any]] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            out[entry["id"]] = entry
    return out


def discover(
    env: Mapping[str, str], *, state_dir: str | None = None, config_path: str | None = None
) -> Install:
    """The agents of the OpenClaw install at ``state_dir`` (see :func:`state_dir_from`); never raises for a
    missing or broken install (an unusable config is reported in ``config_error`` and defaults apply)."""
    from compactd.logs import add_secret

    state = state_dir_from(env, state_dir)
    cfg_path = os.path.abspath(
        os.path.expanduser(
            config_path or env.get("OPENCLAW_CONFIG_PATH") or os.path.join(state, "openclaw.json")
        )
    )
    error, config_owner = None, None
    try:
        doc, config_owner = read_openclaw_config(cfg_path)
    except OpenClawConfigError as exc:
        doc, error = {}, str(exc)
    token = _dig(doc, "gateway", "auth", "token")
    if not (isinstance(token, str) and token):
        token = env.get(TOKEN_ENV) or None
    if token:
        add_secret(token)
    port = (
        _positive_int(_dig(doc, "gateway", "port"), MAX_PORT)
        or _positive_int(_int_or_none(env.get("OPENCLAW_GATEWAY_PORT")), MAX_PORT)
        or DEFAULT_GATEWAY_PORT
    )
    default_model = _model_ref(_dig(doc, "agents", "defaults", "model"))
    default_workspace = _dig(doc, "agents", "defaults", "workspace")
    listed = _agent_entries(doc)
    agents: list[Agent] = []
    jsonl: list[str] = []
    refused: list[tuple[str, str]] = []
    agents_root = os.path.join(state, "agents")
    try:
        names = sorted(os.listdir(agents_root))
    except OSError:
        names = []
    for name in names:
        agent_dir = os.path.join(agents_root, name)
        if name.startswith(".") or not os.path.isdir(agent_dir):
            continue
        if os.path.islink(agent_dir):  # never followed; named when it leads to a database (doctor says why)
            if is_sqlite_agent(agent_dir):
                refused.append((agent_dir, f"{agent_dir} is a symlink"))
            continue
        if not is_sqlite_agent(agent_dir):
            jsonl.append(agent_dir)
            continue
        database = database_of(agent_dir)
        owner = owner_of(agent_dir)
        refusal = agent_refusal(agent_dir, database, config_owner)
        if refusal is not None or owner is None:
            refused.append((agent_dir, refusal or f"{agent_dir} is not a directory"))
            continue
        entry = listed.get(name, {})
        model = _model_ref(entry.get("model")) or default_model
        workspace = next(
            (w for w in (entry.get("workspace"), default_workspace) if isinstance(w, str) and w),
            os.path.join(state, "workspace"),
        )
        agents.append(
            Agent(
                agent_id=name,
                agent_dir=agent_dir,
                database=database,
                workspace=os.path.abspath(os.path.expanduser(str(workspace))),
                context_window=context_window(doc, model),
                model=model,
                owner=owner[0],
                identity=identity_for(*owner),
            )
        )
    try:
        gateway_uid: int | None = os.stat(state).st_uid
    except OSError:
        gateway_uid = None
    return Install(
        state, cfg_path, port, token, tuple(agents), tuple(jsonl), error, gateway_uid, tuple(refused)
    )


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None
