"""compactd's configuration: one YAML file, validated once into one frozen, typed object.

Every problem in a file is reported at once as a :class:`ConfigError` naming the file, the line, the dotted
key and what was expected, so an operator fixes a config in one pass and never reads a traceback. Defaults
come from :mod:`compactd.defaults`; nothing here is a default of its own except where noted.

Secrets never live in the object: the summarizer's key is named by an environment variable or a file and is
read only when :meth:`SummarizerConfig.api_key` is called, so no repr, log line or error can carry it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import stat
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import yaml

from compactd import defaults as d
from compactd.roots import forbidden_root, literal_base, pattern_may_match

__all__ = [
    "AgentDefaults",
    "AgentsConfig",
    "ArchivesConfig",
    "CommitMode",
    "CompactionConfig",
    "Config",
    "ConfigError",
    "ConfigProblem",
    "HookConfig",
    "IdentifierPolicy",
    "MemoryFlushConfig",
    "ModelConfig",
    "ModelsConfig",
    "ProviderConfig",
    "QualityGuardConfig",
    "RetryConfig",
    "ServiceConfig",
    "SessionsConfig",
    "SummarizerConfig",
    "agent_id_for",
    "expand_user",
    "file_kind",
    "load_config",
    "read_small_file",
    "resolve_state_dir",
]

CommitMode = Literal["rotate", "append"]
IdentifierPolicy = Literal["strict", "off", "custom"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

# Not (yet) in compactd.defaults; asked for in the helper's report. Kept here, named, until moved.
# The server's own temperature unless set: None sends no temperature at all, which every server accepts.
SUMMARIZER_TEMPERATURE: float | None = None
# Off by default: only Ollama understands options.num_ctx; other OpenAI-compatible servers may reject it.
SUMMARIZER_OLLAMA_NUM_CTX: bool | int = False
LOG_LEVEL: LogLevel = "INFO"

# A string hook command runs through this shell, so pipes and redirections work as the user expects.
HOOK_SHELL = ("/bin/sh", "-c")
# What an environment-variable name looks like; anything else was most likely the key itself, pasted.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")
_GLOB_CHARS = frozenset("*?[")
# Redaction for free-form strings shown by repr/redacted_dict (hook commands, prompts): common key shapes.
_SECRET_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_-]{12,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{16,}"
    r"|\bxox[abprs]-[A-Za-z0-9-]{8,}"
    r"|(?i:\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"
    r"|(?i:\b(?:api[_-]?key|token|secret|password|passwd)\s*[=:]\s*)\S+"
)
_DEFAULTS_SOURCE = "<defaults>"


# --- errors -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
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


# --- paths and environment ----------------------------------------------------------------------------------


def expand_user(path: str, env: Mapping[str, str] | None = None) -> str:
    """Expand a leading ``~`` using ``env['HOME']`` (so tests can pass an environment), else the real home."""
    environ = os.environ if env is None else env
    if path == "~" or path.startswith("~/"):
        home = environ.get("HOME") or os.path.expanduser("~")
        return home + path[1:]
    return os.path.expanduser(path) if path.startswith("~") else path


def resolve_state_dir(
    env: Mapping[str, str], configured: str | None = None, base_dir: Path | None = None
) -> Path:
    """The state directory: the configured one, else systemd's, else XDG's, else ``~/.local/state/compactd``.

    ``$STATE_DIRECTORY`` may list several directories separated by ``:`` (systemd); the first is ours. A
    relative ``$XDG_STATE_HOME`` is ignored, as the XDG spec requires.
    """
    if configured:
        path = Path(expand_user(configured, env))
        return path if path.is_absolute() else (base_dir or Path.cwd()) / path
    systemd = env.get("STATE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd)
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "compactd"
    return Path(expand_user("~/.local/state/compactd", env))


def agent_id_for(session_file: str | os.PathLike[str]) -> str | None:
    """OpenClaw's agent id from ``.../agents/<id>/sessions/<file>.jsonl``; None for other layouts."""
    parts = Path(session_file).parts
    if len(parts) >= 4 and parts[-2] == "sessions" and parts[-4] == "agents":
        return parts[-3]
    return None


def _redact(text: str) -> str:
    return _SECRET_SHAPES.sub("***", text)


def _is_path_pattern(key: str) -> bool:
    return "/" in key or key.startswith("~") or any(c in _GLOB_CHARS for c in key)


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


# --- the configuration object -------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class SessionsConfig:
    """Where transcripts live and when one may be touched."""

    roots: tuple[str, ...] = _opt(d.SESSION_ROOTS, parse=_parse_roots)
    idle_seconds: float = _opt(d.IDLE_SECONDS, ge=0)
    abandoned_turn_seconds: float = _opt(d.ABANDONED_TURN_SECONDS, ge=0)
    ignore: tuple[str, ...] = _opt((), parse=_parse_globs)

    def is_ignored(self, path: str | os.PathLike[str]) -> bool:
        """Whether a transcript's base name matches one of the ``ignore`` globs."""
        name = Path(path).name
        return any(fnmatchcase(name, pattern) for pattern in self.ignore)

    def expanded_roots(self, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The root globs with ``~`` expanded now (the home of the environment given, else the process's)."""
        return tuple(expand_user(root, env) for root in self.roots)


@dataclass(frozen=True, slots=True)
class ModelConfig:
    context_tokens: int | None = _opt(None, gt=0)


def _parse_models(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> Mapping[str, ModelConfig]:
    return ctx.mapping_of(value, path, ModelConfig)


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    models: Mapping[str, ModelConfig] = _opt(factory=_empty_mapping, parse=_parse_models)


def _parse_providers(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> Mapping[str, ProviderConfig]:
    return ctx.mapping_of(value, path, ProviderConfig)


@dataclass(frozen=True, slots=True)
class ModelsConfig:
    """Known context windows: ``providers.<provider>.models.<model>.context_tokens``."""

    providers: Mapping[str, ProviderConfig] = _opt(factory=_empty_mapping, parse=_parse_providers)

    def window_for(self, provider: str | None, model: str | None) -> int | None:
        """The configured window of a model: its provider's entry, else the smallest entry of that model id.

        A transcript may name a provider the config spells differently (or none); when the model id is listed
        under other providers, the smallest window is the safe guess (compacting early never loses a turn).
        """
        if not model:
            return None
        if provider is not None:
            entry = self.providers.get(provider)
            found = entry.models.get(model) if entry else None
            if found is not None and found.context_tokens is not None:
                return found.context_tokens
        windows = [
            m.context_tokens
            for p in self.providers.values()
            if (m := p.models.get(model)) is not None and m.context_tokens is not None
        ]
        return min(windows) if windows else None


@dataclass(frozen=True, slots=True)
class AgentDefaults:
    # A cap on every window: it can only lower the resolved window, never raise it.
    context_tokens: int | None = _opt(None, gt=0)


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


@dataclass(frozen=True, slots=True)
class AgentsConfig:
    """Per-agent settings: the window cap, and workspaces (AGENTS.md, memory/) overriding a header's cwd."""

    defaults: AgentDefaults = field(default_factory=AgentDefaults)
    # {agent id | sessions-dir glob: workspace dir}; agent ids match first, then globs in file order.
    workspaces: Mapping[str, str] = _opt(factory=_empty_mapping, parse=_parse_workspaces)

    def workspace_for(
        self,
        session_file: str | os.PathLike[str],
        *,
        agent_id: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Path | None:
        """The configured workspace of a session, or None (then the session header's ``cwd`` is used).

        The agent id is OpenClaw's (``agents/<id>/sessions``) unless given; a glob key is matched against the
        directory holding the transcript, with ``~`` expanded.
        """
        agent = agent_id if agent_id is not None else agent_id_for(session_file)
        if agent is not None and agent in self.workspaces and not _is_path_pattern(agent):
            return Path(expand_user(self.workspaces[agent], env))
        directory = str(Path(session_file).parent)
        for key, target in self.workspaces.items():
            if _is_path_pattern(key) and fnmatchcase(directory, expand_user(key, env).rstrip("/")):
                return Path(expand_user(target, env))
        return None


@dataclass(frozen=True, slots=True)
class QualityGuardConfig:
    enabled: bool = _opt(d.QUALITY_GUARD_ENABLED)
    max_retries: int = _opt(d.QUALITY_GUARD_RETRIES, ge=0, le=d.QUALITY_GUARD_MAX_RETRIES)


@dataclass(frozen=True, slots=True)
class ArchivesConfig:
    keep_days: float = _opt(d.ARCHIVE_KEEP_DAYS, ge=0)  # 0: no age limit
    keep_count: int = _opt(d.ARCHIVE_KEEP_COUNT, ge=0)  # 0: no count cap
    warn_bytes: int = _opt(d.ARCHIVE_WARN_BYTES, gt=0)


def _parse_sections(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> tuple[str, ...]:
    return _string_list(value, ctx, path)


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    reserve_tokens: int = _opt(d.RESERVE_TOKENS, ge=0)
    keep_recent_turns: int = _opt(d.KEEP_RECENT_TURNS, ge=0, le=d.MAX_KEEP_RECENT_TURNS)
    keep_recent_tokens: int = _opt(d.KEEP_RECENT_TOKENS, ge=0)
    commit: CommitMode = _opt(d.COMMIT_MODE)  # noqa: RUF009 - a str, immutable
    rotate_grace_seconds: float = _opt(d.ROTATE_GRACE_SECONDS, ge=0.25)
    tool_result_share: float = _opt(d.TOOL_RESULT_CONTEXT_SHARE, gt=0, le=1)
    tool_result_max_chars: int = _opt(d.TOOL_RESULT_MAX_CHARS, gt=0)
    tool_result_min_keep_chars: int = _opt(d.TOOL_RESULT_MIN_KEEP_CHARS, ge=0)
    identifier_policy: IdentifierPolicy = _opt(d.IDENTIFIER_POLICY)  # noqa: RUF009 - a str
    identifier_cap: int = _opt(d.IDENTIFIER_CAP, ge=0)
    identifier_instructions: str | None = _opt(None)
    quality_guard: QualityGuardConfig = field(default_factory=QualityGuardConfig)
    summary_max_chars: int = _opt(d.SUMMARY_MAX_CHARS, gt=0)
    redact_secrets: bool = _opt(d.REDACT_SECRETS)
    post_compaction_sections: tuple[str, ...] = _opt(d.POST_COMPACTION_SECTIONS, parse=_parse_sections)
    post_compaction_max_chars: int = _opt(d.POST_COMPACTION_MAX_CHARS, gt=0)
    archives: ArchivesConfig = field(default_factory=ArchivesConfig)


def _parse_command(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> tuple[str, ...]:
    if isinstance(value, str):
        if not value.strip():
            raise _Invalid("expected a non-empty command")
        return (*HOOK_SHELL, value)
    argv = _string_list(value, ctx, path)
    if not argv or not argv[0]:
        raise _Invalid("expected a non-empty argv list (or one string run by /bin/sh -c)")
    return argv


@dataclass(frozen=True, slots=True)
class HookConfig:
    """A before-compaction hook: argv given the event as JSON on stdin (a string runs via ``/bin/sh -c``)."""

    command: tuple[str, ...] = _opt(parse=_parse_command)
    timeout_seconds: float = _opt(d.MEMORY_HOOK_TIMEOUT_SECONDS, gt=0)

    def __repr__(self) -> str:
        command = tuple(_redact(a) for a in self.command)
        return f"HookConfig(command={command!r}, timeout_seconds={self.timeout_seconds!r})"


def _parse_hooks(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> tuple[HookConfig, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _Invalid(f"expected a list of {{command, timeout_seconds}} mappings, got {_kind(value)}")
    hooks = []
    for index, item in enumerate(value):
        hook = ctx.dataclass_of(HookConfig, item, (*path, index))
        if hook is not None:
            hooks.append(hook)
    return tuple(hooks)


@dataclass(frozen=True, slots=True)
class MemoryFlushConfig:
    enabled: bool = _opt(d.MEMORY_FLUSH_ENABLED)
    soft_threshold_tokens: int = _opt(d.MEMORY_FLUSH_SOFT_THRESHOLD_TOKENS, ge=0)
    # 0 disables the size trigger.
    force_bytes: int = _opt(d.MEMORY_FLUSH_FORCE_BYTES, ge=0)
    hooks: tuple[HookConfig, ...] = _opt((), parse=_parse_hooks)
    # Replace the built-in flush prompts (None = built in).
    prompt: str | None = _opt(None, show=False)
    system_prompt: str | None = _opt(None, show=False)


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
    if not isinstance(value, str) or not _ENV_NAME.match(value):
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


@dataclass(frozen=True, slots=True)
class RetryConfig:
    attempts: int = _opt(d.SUMMARIZER_RETRY_ATTEMPTS, ge=1)
    base_seconds: float = _opt(d.SUMMARIZER_RETRY_BASE_SECONDS, ge=0)
    max_seconds: float = _opt(d.SUMMARIZER_RETRY_MAX_SECONDS, ge=0)
    jitter: float = _opt(d.SUMMARIZER_RETRY_JITTER, ge=0, le=1)


@dataclass(frozen=True, slots=True)
class SummarizerConfig:
    """The OpenAI-compatible endpoint that writes summaries; no ``base_url``: the deterministic digest."""

    base_url: str | None = _opt(None, parse=_parse_base_url)
    model: str | None = _opt(None)
    api_key_env: str | None = _opt(None, parse=_parse_env_name)
    api_key_file: str | None = _opt(None, parse=_parse_key_file)
    context_tokens: int = _opt(d.SUMMARIZER_CONTEXT_TOKENS, gt=0)
    timeout_seconds: float = _opt(d.SUMMARIZER_TIMEOUT_SECONDS, gt=0)
    max_concurrency: int = _opt(d.SUMMARIZER_MAX_CONCURRENCY, ge=1)
    max_output_tokens: int = _opt(d.SUMMARIZER_MAX_OUTPUT_TOKENS, gt=0)
    ollama_num_ctx: bool | int = _opt(SUMMARIZER_OLLAMA_NUM_CTX, parse=_parse_num_ctx)
    temperature: float | None = _opt(SUMMARIZER_TEMPERATURE, ge=0, le=2)
    retry: RetryConfig = field(default_factory=RetryConfig)

    @property
    def enabled(self) -> bool:
        """Whether a model is configured at all."""
        return self.base_url is not None

    def num_ctx(self) -> int | None:
        """The ``options.num_ctx`` to send Ollama: True sends ``context_tokens``, a number sends itself."""
        if self.ollama_num_ctx is True:
            return self.context_tokens
        if self.ollama_num_ctx is False:
            return None
        return int(self.ollama_num_ctx)

    def api_key(self, env: Mapping[str, str] | None = None) -> str | None:
        """The key, read now: the environment variable when set and non-empty, else the key file, else None.

        Raises ConfigError (naming the file, never its content) when the key file cannot be read.
        """
        environ = os.environ if env is None else env
        if self.api_key_env:
            value = environ.get(self.api_key_env, "").strip()
            if value:
                return value
        if self.api_key_file:
            path = expand_user(self.api_key_file, environ)
            try:
                text = read_small_file(path, KEY_FILE_MAX_BYTES).decode("utf-8").strip()
            except (OSError, UnicodeDecodeError, _Refused) as exc:
                if isinstance(exc, _Refused):
                    reason = str(exc)
                else:
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
                problem = ConfigProblem(
                    "summarizer.api_key_file", f"cannot read the key file {path}: {reason}"
                )
                raise ConfigError(path, [problem]) from None
            return text or None
        return None


@dataclass(frozen=True, slots=True)
class OpenClawConfig:
    """OpenClaw 2026.9+ (SQLite session stores): found without configuration; these turn it off or point
    elsewhere (null: ``$OPENCLAW_STATE_DIR``/``~/.openclaw`` and ``$OPENCLAW_CONFIG_PATH``/``<state>/openclaw.json``)."""

    enabled: bool = _opt(True)
    state_dir: str | None = _opt(None)
    config_path: str | None = _opt(None)


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    rescan_seconds: float = _opt(d.RESCAN_SECONDS, gt=0)
    debounce_ms: int = _opt(d.WATCH_DEBOUNCE_MS, ge=0)
    step_ms: int = _opt(d.WATCH_STEP_MS, gt=0)
    status_refresh_seconds: float = _opt(d.STATUS_REFRESH_SECONDS, gt=0)
    backoff_base_seconds: float = _opt(d.BACKOFF_BASE_SECONDS, gt=0)
    backoff_max_seconds: float = _opt(d.BACKOFF_MAX_SECONDS, gt=0)
    lock_stale_seconds: float = _opt(d.LOCK_STALE_SECONDS, gt=0)


def _parse_state_dir(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> Path:
    if value is not None and (not isinstance(value, str) or not value):
        raise _Invalid(f"expected a directory path or null (systemd/XDG default), got {_kind(value)}")
    return resolve_state_dir(ctx.env, value, ctx.base_dir)


def _parse_log_level(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> str:
    choices = typing.get_args(LogLevel)
    if isinstance(value, str) and value.upper() in choices:
        return value.upper()
    raise _Invalid(f"expected one of {', '.join(choices)}, got {_describe(value, echo=True)}")


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration. Build with :func:`load_config` or :meth:`from_mapping`; never mutated."""

    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    memory_flush: MemoryFlushConfig = field(default_factory=MemoryFlushConfig)
    summarizer: SummarizerConfig = field(default_factory=SummarizerConfig)
    service: ServiceConfig = field(default_factory=ServiceConfig)
    openclaw: OpenClawConfig = field(default_factory=OpenClawConfig)
    state_dir: Path = _opt(  # noqa: RUF009 - resolved from the environment when built
        factory=lambda: resolve_state_dir(os.environ), parse=_parse_state_dir, resolve_absent=True
    )
    log_level: str = _opt(LOG_LEVEL, parse=_parse_log_level)
    # Where this configuration came from: a file path or "<defaults>"; not part of equality.
    source: str = _opt(_DEFAULTS_SOURCE, compare=False)

    @classmethod
    def from_mapping(
        cls,
        data: Mapping[str, Any] | None,
        source: str = "<file>",
        *,
        env: Mapping[str, str] | None = None,
        base_dir: str | Path | None = None,
    ) -> Config:
        """Validate an already-parsed mapping; relative paths are taken from ``base_dir`` (default: cwd)."""
        return _build(data, source, env, base_dir, {}, [])

    @classmethod
    def defaults(cls, env: Mapping[str, str] | None = None) -> Config:
        """The built-in configuration (the state directory resolved from ``env``)."""
        return cls.from_mapping({}, _DEFAULTS_SOURCE, env=env)

    def redacted_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the whole configuration for printing.

        The object holds no secret values by construction (only the key's variable name and file path);
        free-form strings that could embed one (hook commands, prompts) are masked where they look like keys.
        """
        return cast(dict[str, Any], _plain(self))


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
    return cast(Config, dataclasses.replace(config, source=source))


# --- cross-field checks -------------------------------------------------------------------------------------


def _largest_window(config: Config) -> tuple[int, str]:
    """The largest window this config can resolve, with the key responsible (for the reserve check)."""
    window, key = d.DEFAULT_CONTEXT_TOKENS, "the built-in default window"
    for provider_name, provider in config.models.providers.items():
        for model_name, model in provider.models.items():
            if model.context_tokens is not None and model.context_tokens > window:
                window = model.context_tokens
                key = _dotted(("models", "providers", provider_name, "models", model_name, "context_tokens"))
    cap = config.agents.defaults.context_tokens
    if cap is not None and cap < window:
        return cap, "agents.defaults.context_tokens"
    return window, key


def _check_across(config: Config, ctx: _Ctx) -> None:
    compaction, summarizer = config.compaction, config.summarizer
    if ctx.explicit_reserve:
        # A reserve that no window can hold is never honoured: the minimum prompt budget always wins. Only an
        # explicit value is checked, so a default reserve under a small cap still works (spec §4).
        window, key = _largest_window(config)
        if compaction.reserve_tokens >= window:
            ctx.add(
                ("compaction", "reserve_tokens"),
                f"expected fewer tokens than the largest context window this configuration allows "
                f"({window}, from {key}); got {compaction.reserve_tokens}",
            )
    if compaction.identifier_policy == "custom" and not (compaction.identifier_instructions or "").strip():
        ctx.add(
            ("compaction", "identifier_instructions"),
            "expected instructions when identifier_policy is custom",
        )
    if summarizer.base_url is not None and not (summarizer.model or "").strip():
        ctx.add(("summarizer", "model"), "expected a model name when summarizer.base_url is set")
    if summarizer.max_output_tokens >= summarizer.context_tokens:
        ctx.add(
            ("summarizer", "max_output_tokens"),
            f"expected fewer than summarizer.context_tokens ({summarizer.context_tokens}); "
            f"got {summarizer.max_output_tokens}",
        )
    if summarizer.retry.max_seconds < summarizer.retry.base_seconds:
        ctx.add(("summarizer", "retry", "max_seconds"), "expected at least summarizer.retry.base_seconds")
    if config.service.backoff_max_seconds < config.service.backoff_base_seconds:
        ctx.add(("service", "backoff_max_seconds"), "expected at least service.backoff_base_seconds")
    _check_state_dir_outside_roots(config, ctx)


def _check_state_dir_outside_roots(config: Config, ctx: _Ctx) -> None:
    """The state directory must not be a sessions root or inside one: its journal.jsonl would be taken for a
    session, and a root's files are what compactd rewrites. Reported at state_dir when it is configured."""
    state = os.path.normpath(str(config.state_dir))
    states = dict.fromkeys((state, os.path.realpath(state)))
    for index, root in enumerate(config.sessions.roots):
        pattern = os.path.normpath(expand_user(root, ctx.env))
        if not os.path.isabs(pattern):
            continue
        base = literal_base(pattern)
        rebased = os.path.realpath(base) + pattern[len(base) :]
        if not any(pattern_may_match(p, s) for p in (pattern, rebased) for s in states):
            continue
        if ctx.explicit_state_dir:
            ctx.add(
                ("state_dir",),
                f"is inside the sessions root {root} (sessions.roots[{index}]); "
                "put compactd's state outside every sessions root",
            )
        else:
            ctx.add(
                ("sessions", "roots", index),
                f"holds the state directory {state}; put compactd's state outside every sessions root "
                "(set state_dir)",
            )
        return


# --- the validating builder ---------------------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
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
        elif _PLAIN_KEY.match(part):
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


@dataclass
class _Ctx:
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


# --- loading ------------------------------------------------------------------------------------------------


def _collect_marks(
    node: yaml.Node,
    path: tuple[str | int, ...],
    marks: dict[tuple[str | int, ...], tuple[int, int]],
    problems: list[ConfigProblem],
    seen: set[int],
) -> None:
    """Map every key path to its line/column, and report duplicate keys (PyYAML silently keeps the last)."""
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
                        "duplicate key (a later value would silently win)",
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
    """The document, the position of every key path, and the duplicate keys (reported with the rest)."""
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


# A real configuration is a few kilobytes; PyYAML takes about a second per MiB and far more memory, so a
# larger file is refused before it is parsed (a 100 MB one took 93 s).
CONFIG_MAX_BYTES = 1 << 20
# An API key file holds one key.
KEY_FILE_MAX_BYTES = 64 << 10
_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10} KiB"


def file_kind(mode: int) -> str:
    """``a FIFO``, ``a directory``...: what a file that is not a regular file is, for an error message."""
    return _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")


class _Refused(Exception):
    """A file that is not read at all: not a regular file, or larger than its limit."""


def read_small_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (symlinks followed).

    Opened non-blocking, so a FIFO cannot hang us, and checked on the open descriptor, so ``/dev/zero`` or
    a file growing while we read cannot exhaust memory: at most ``limit + 1`` bytes are ever read. Raises
    OSError, or ``_Refused`` with the reason.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Refused(f"not a regular file ({file_kind(st.st_mode)})")
        too_big = f"larger than {_size(limit)}, refusing to parse it"
        if st.st_size > limit:
            raise _Refused(f"{too_big} ({st.st_size:,} bytes)")
        parts: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, limit + 1 - got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        if got > limit:
            raise _Refused(too_big)
        return b"".join(parts)
    finally:
        os.close(fd)


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


# --- printing -----------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, HookConfig):
            out["command"] = [_redact(a) for a in value.command]
        if isinstance(value, MemoryFlushConfig):
            out["prompt"] = None if value.prompt is None else _redact(value.prompt)
            out["system_prompt"] = None if value.system_prompt is None else _redact(value.system_prompt)
        return out
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
