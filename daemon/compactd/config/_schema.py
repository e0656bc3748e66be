"""The configuration's schema: one frozen, typed dataclass per group, each field with its default and rules.

Defaults come from :mod:`compactd.defaults`; nothing here is a default of its own except where noted. Secrets
never live in the object: the summarizer's key is named by an environment variable or a file and is read only
when :meth:`SummarizerConfig.api_key` is called, so no repr, log line or error can carry it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal, cast

from compactd import defaults as d
from compactd.config._env import (
    KEY_FILE_MAX_BYTES,
    _is_path_pattern,
    _redact,
    _Refused,
    agent_id_for,
    expand_user,
    read_small_file,
    resolve_state_dir,
)
from compactd.config._parsers import (
    LogLevel,
    _parse_base_url,
    _parse_command,
    _parse_env_name,
    _parse_globs,
    _parse_http_listen,
    _parse_keep_alive,
    _parse_key_file,
    _parse_log_level,
    _parse_metrics_textfile,
    _parse_num_ctx,
    _parse_roots,
    _parse_sections,
    _parse_state_dir,
    _parse_workspaces,
)
from compactd.config._validate import ConfigError, ConfigProblem, _Ctx, _empty_mapping, _Invalid, _kind, _opt
from compactd.datarecord import datarecord
from compactd.pi_settings import PiCompaction

CommitMode = Literal["rotate", "append"]
SummarizerApi = Literal["auto", "openai", "ollama"]
IdentifierPolicy = Literal["strict", "off", "custom"]
# When the model fails: commit the deterministic digest, or leave the session for a later cycle (backed off).
SummarizerFallback = Literal["digest", "none"]

# Not (yet) in compactd.defaults; asked for in the helper's report. Kept here, named, until moved.
# The server's own temperature unless set: None sends no temperature at all, which every server accepts.
SUMMARIZER_TEMPERATURE: float | None = None
# Deprecated: compactd now sets options.num_ctx itself on Ollama's native API (a number still caps it).
SUMMARIZER_OLLAMA_NUM_CTX: bool | int = False
# Ollama's native API when the server is Ollama (the only one where the context can be set per request).
SUMMARIZER_API: SummarizerApi = "auto"
# None: the server's OLLAMA_KEEP_ALIVE (5 minutes unless set) is left alone.
SUMMARIZER_KEEP_ALIVE: str | float | None = None
LOG_LEVEL: LogLevel = "INFO"
_DEFAULTS_SOURCE = "<defaults>"


@datarecord(frozen=True, slots=True, rare=True)
class SessionsConfig:
    """Where transcripts live and when one may be touched."""

    roots: tuple[str, ...] = _opt(d.SESSION_ROOTS, parse=_parse_roots)
    idle_seconds: float = _opt(d.IDLE_SECONDS, ge=0)
    abandoned_turn_seconds: float = _opt(d.ABANDONED_TURN_SECONDS, ge=0)
    ignore: tuple[str, ...] = _opt((), parse=_parse_globs)

    def is_ignored(self, path: str | os.PathLike[str]) -> bool:
        """Whether a transcript's base name matches one of the ``ignore`` globs."""
        if not self.ignore:
            return False  # the common case, once per file per scan: kept cheap
        name = os.path.basename(os.fspath(path))
        return any(fnmatchcase(name, pattern) for pattern in self.ignore)


@datarecord(frozen=True, slots=True, rare=True)
class ModelConfig:
    """One model's entry under ``models.providers.<provider>.models``: its context window."""

    context_tokens: int | None = _opt(None, gt=0)


def _parse_models(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> Mapping[str, ModelConfig]:
    return ctx.mapping_of(value, path, ModelConfig)


@datarecord(frozen=True, slots=True, rare=True)
class ProviderConfig:
    """One provider's entry under ``models.providers``: its models."""

    models: Mapping[str, ModelConfig] = _opt(factory=_empty_mapping, parse=_parse_models)


def _parse_providers(value: Any, ctx: _Ctx, path: tuple[str | int, ...]) -> Mapping[str, ProviderConfig]:
    return ctx.mapping_of(value, path, ProviderConfig)


@datarecord(frozen=True, slots=True, rare=True)
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


@datarecord(frozen=True, slots=True, rare=True)
class AgentDefaults:
    """``agents.defaults``: what applies to every agent's sessions."""

    # A cap on every window: it can only lower the resolved window, never raise it.
    context_tokens: int | None = _opt(None, gt=0)


@datarecord(frozen=True, slots=True, rare=True)
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
        if not self.workspaces:  # the usual case: no agent id nor directory to work out for nothing
            return None
        agent = agent_id if agent_id is not None else agent_id_for(session_file)
        if agent is not None and agent in self.workspaces and not _is_path_pattern(agent):
            return Path(expand_user(self.workspaces[agent], env))
        directory = str(Path(session_file).parent)
        for key, target in self.workspaces.items():
            if _is_path_pattern(key) and fnmatchcase(directory, expand_user(key, env).rstrip("/")):
                return Path(expand_user(target, env))
        return None


@datarecord(frozen=True, slots=True, rare=True)
class QualityGuardConfig:
    """``compaction.quality_guard``: whether a model's summary is checked, and how often it is retried."""

    enabled: bool = _opt(d.QUALITY_GUARD_ENABLED)
    max_retries: int = _opt(d.QUALITY_GUARD_RETRIES, ge=0, le=d.QUALITY_GUARD_MAX_RETRIES)


@datarecord(frozen=True, slots=True, rare=True)
class ArchivesConfig:
    """``compaction.archives``: how long rotated-out transcripts are kept, and when their size is warned of."""

    keep_days: float = _opt(d.ARCHIVE_KEEP_DAYS, ge=0)  # 0: no age limit
    keep_count: int = _opt(d.ARCHIVE_KEEP_COUNT, ge=0)  # 0: no count cap
    warn_bytes: int = _opt(d.ARCHIVE_WARN_BYTES, gt=0)


@datarecord(frozen=True, slots=True, rare=True)
class CompactionConfig:
    """``compaction``: when a session is compacted, what its summary keeps, how it is pruned and committed."""

    reserve_tokens: int = _opt(d.RESERVE_TOKENS, ge=0)
    keep_recent_turns: int = _opt(d.KEEP_RECENT_TURNS, ge=0, le=d.MAX_KEEP_RECENT_TURNS)
    keep_recent_tokens: int = _opt(d.KEEP_RECENT_TOKENS, ge=0)
    target_fill: float = _opt(d.TARGET_FILL, gt=0, le=1)
    commit: CommitMode = _opt(d.COMMIT_MODE)
    rotate_grace_seconds: float = _opt(d.ROTATE_GRACE_SECONDS, ge=0.25)
    tool_result_share: float = _opt(d.TOOL_RESULT_CONTEXT_SHARE, gt=0, le=1)
    tool_result_max_chars: int = _opt(d.TOOL_RESULT_MAX_CHARS, gt=0)
    tool_result_min_keep_chars: int = _opt(d.TOOL_RESULT_MIN_KEEP_CHARS, ge=0)
    identifier_policy: IdentifierPolicy = _opt(d.IDENTIFIER_POLICY)
    identifier_cap: int = _opt(d.IDENTIFIER_CAP, ge=0)
    identifier_instructions: str | None = _opt(None)
    quality_guard: QualityGuardConfig = field(default_factory=QualityGuardConfig)
    summary_max_chars: int = _opt(d.SUMMARY_MAX_CHARS, gt=0)
    redact_secrets: bool = _opt(d.REDACT_SECRETS)
    prepare_as_read: bool = _opt(d.PREPARE_AS_READ)
    post_compaction_sections: tuple[str, ...] = _opt(d.POST_COMPACTION_SECTIONS, parse=_parse_sections)
    post_compaction_max_chars: int = _opt(d.POST_COMPACTION_MAX_CHARS, gt=0)
    archives: ArchivesConfig = field(default_factory=ArchivesConfig)


@datarecord(frozen=True, slots=True, rare=True)
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


@datarecord(frozen=True, slots=True, rare=True)
class MemoryFlushConfig:
    """``memory_flush``: what is saved from a span (hooks, the workspace's memory/) before it is compacted."""

    enabled: bool = _opt(d.MEMORY_FLUSH_ENABLED)
    soft_threshold_tokens: int = _opt(d.MEMORY_FLUSH_SOFT_THRESHOLD_TOKENS, ge=0)
    # 0 disables the size trigger.
    force_bytes: int = _opt(d.MEMORY_FLUSH_FORCE_BYTES, ge=0)
    hooks: tuple[HookConfig, ...] = _opt((), parse=_parse_hooks)
    # Replace the built-in flush prompts (None = built in).
    prompt: str | None = _opt(None, show=False)
    system_prompt: str | None = _opt(None, show=False)


@datarecord(frozen=True, slots=True, rare=True)
class RetryConfig:
    """``summarizer.retry``: the backoff between the attempts of a failed model call."""

    attempts: int = _opt(d.SUMMARIZER_RETRY_ATTEMPTS, ge=1)
    base_seconds: float = _opt(d.SUMMARIZER_RETRY_BASE_SECONDS, ge=0)
    max_seconds: float = _opt(d.SUMMARIZER_RETRY_MAX_SECONDS, ge=0)
    jitter: float = _opt(d.SUMMARIZER_RETRY_JITTER, ge=0, le=1)


@datarecord(frozen=True, slots=True, rare=True)
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
    api: SummarizerApi = _opt(SUMMARIZER_API)
    keep_alive: str | float | None = _opt(SUMMARIZER_KEEP_ALIVE, parse=_parse_keep_alive)
    temperature: float | None = _opt(SUMMARIZER_TEMPERATURE, ge=0, le=2)
    retry: RetryConfig = field(default_factory=RetryConfig)
    fallback: SummarizerFallback = _opt(d.SUMMARIZER_FALLBACK)

    @property
    def enabled(self) -> bool:
        """Whether a model is configured at all."""
        return self.base_url is not None

    def num_ctx(self) -> int | None:
        """The deprecated ``ollama_num_ctx`` as a cap on the native ``options.num_ctx`` (None: no cap; True meant
        ``context_tokens``, which bounds it anyway)."""
        if self.ollama_num_ctx is True:
            return self.context_tokens
        if self.ollama_num_ctx is False:
            return None
        return int(self.ollama_num_ctx)

    def deprecations(self) -> list[str]:
        """What the operator should change in this section (shown by ``doctor`` and logged at start)."""
        if self.ollama_num_ctx is False:
            return []
        return [
            "summarizer.ollama_num_ctx is deprecated: Ollama's OpenAI-compatible endpoint ignores a per-request "
            "num_ctx, so compactd no longer sends it there; with summarizer.api auto (the default) or ollama it "
            "talks to Ollama's /api/chat and sets options.num_ctx itself (up to summarizer.context_tokens and "
            "the model's context_length). Remove the key (a number still caps the num_ctx sent)"
        ]

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


@datarecord(frozen=True, slots=True, rare=True)
class OpenClawConfig:
    """OpenClaw 2026.9+ (SQLite session stores): found without configuration; these turn it off or point
    elsewhere (null: ``$OPENCLAW_STATE_DIR``/``~/.openclaw`` and ``$OPENCLAW_CONFIG_PATH``/``<state>/openclaw.json``)."""

    enabled: bool = _opt(True)
    state_dir: str | None = _opt(None)
    config_path: str | None = _opt(None)
    # One deadline per gateway RPC, from the TCP connect to the answer (its summarizer's timeout is 180 s).
    rpc_timeout_seconds: float = _opt(d.OPENCLAW_RPC_TIMEOUT_SECONDS, gt=0)


@datarecord(frozen=True, slots=True, rare=True)
class CodexConfig:
    """Codex CLI rollouts (design.md §6.16): followed without configuration when ``<home>/sessions`` exists
    (null home: ``$CODEX_HOME``, else ``~/.codex``); ``enabled: false`` leaves them alone."""

    enabled: bool = _opt(True)
    home: str | None = _opt(None)


@datarecord(frozen=True, slots=True, rare=True)
class PiConfig:
    """pi's own compaction settings (``reserveTokens``, ``keepRecentTokens``, ``modelOverrides`` in its
    ``settings.json``) are a session's thresholds where the user set them (null agent_dir:
    ``$PI_CODING_AGENT_DIR``, else ``~/.pi/agent``)."""

    use_settings: bool = _opt(True)
    agent_dir: str | None = _opt(None)
    # Read from pi's settings.json when the configuration is loaded (not a key of compactd's own file).
    settings: PiCompaction | None = field(default=None, init=False)


@datarecord(frozen=True, slots=True, rare=True)
class ServiceConfig:
    """``service``: the daemon's rescans, watching, status, backoff and metrics."""

    rescan_seconds: float = _opt(d.RESCAN_SECONDS, gt=0)
    debounce_ms: int = _opt(d.WATCH_DEBOUNCE_MS, ge=0)
    step_ms: int = _opt(d.WATCH_STEP_MS, gt=0)
    status_refresh_seconds: float = _opt(d.STATUS_REFRESH_SECONDS, gt=0)
    backoff_base_seconds: float = _opt(d.BACKOFF_BASE_SECONDS, gt=0)
    backoff_max_seconds: float = _opt(d.BACKOFF_MAX_SECONDS, gt=0)
    # node_exporter's textfile collector can read the metrics where it looks (None: metrics.prom in state_dir).
    metrics_textfile: Path | None = _opt(None, parse=_parse_metrics_textfile)
    # Opt-in HTTP endpoint (/metrics, /healthz), e.g. "127.0.0.1:9464"; a bare port is on loopback.
    http_listen: str | None = _opt(None, parse=_parse_http_listen)
    # The per-session metric series kept: the fullest sessions' (every session counts in the totals).
    metrics_top_sessions: int = _opt(d.METRICS_TOP_SESSIONS, ge=0)


@datarecord(frozen=True, slots=True, rare=True)
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
    codex: CodexConfig = field(default_factory=CodexConfig)
    pi: PiConfig = field(default_factory=PiConfig)
    state_dir: Path = _opt(
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
        from compactd.config._load import _build

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
