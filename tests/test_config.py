"""Configuration: defaults, the example file, every validation rule, secrets, state-dir resolution."""

from __future__ import annotations

import dataclasses
import os
import re
import resource
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from compactd import defaults as d
from compactd.config import (
    CONFIG_MAX_BYTES,
    Config,
    ConfigError,
    agent_id_for,
    expand_user,
    load_config,
    resolve_state_dir,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "config.example.yaml"
ENV = {"HOME": "/home/tester"}
SECRET = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"


def write(tmp_path: Path, text: str, name: str = "compactd.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_for(tmp_path: Path, text: str, env: Mapping[str, str] = ENV) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env)
    return info.value


# --- defaults -----------------------------------------------------------------------------------------------

DEFAULTS_TABLE: list[tuple[str, Any]] = [
    ("sessions.roots", d.SESSION_ROOTS),
    ("sessions.idle_seconds", d.IDLE_SECONDS),
    ("sessions.abandoned_turn_seconds", d.ABANDONED_TURN_SECONDS),
    ("sessions.ignore", ()),
    ("agents.defaults.context_tokens", None),
    ("compaction.reserve_tokens", d.RESERVE_TOKENS),
    ("compaction.keep_recent_turns", d.KEEP_RECENT_TURNS),
    ("compaction.keep_recent_tokens", d.KEEP_RECENT_TOKENS),
    ("compaction.target_fill", d.TARGET_FILL),
    ("compaction.commit", d.COMMIT_MODE),
    ("compaction.rotate_grace_seconds", d.ROTATE_GRACE_SECONDS),
    ("compaction.tool_result_share", d.TOOL_RESULT_CONTEXT_SHARE),
    ("compaction.tool_result_max_chars", d.TOOL_RESULT_MAX_CHARS),
    ("compaction.tool_result_min_keep_chars", d.TOOL_RESULT_MIN_KEEP_CHARS),
    ("compaction.identifier_policy", d.IDENTIFIER_POLICY),
    ("compaction.identifier_cap", d.IDENTIFIER_CAP),
    ("compaction.identifier_instructions", None),
    ("compaction.quality_guard.enabled", d.QUALITY_GUARD_ENABLED),
    ("compaction.quality_guard.max_retries", d.QUALITY_GUARD_RETRIES),
    ("compaction.summary_max_chars", d.SUMMARY_MAX_CHARS),
    ("compaction.redact_secrets", d.REDACT_SECRETS),
    ("compaction.prepare_as_read", d.PREPARE_AS_READ),
    ("compaction.post_compaction_sections", d.POST_COMPACTION_SECTIONS),
    ("compaction.post_compaction_max_chars", d.POST_COMPACTION_MAX_CHARS),
    ("compaction.archives.keep_count", d.ARCHIVE_KEEP_COUNT),
    ("compaction.archives.keep_days", d.ARCHIVE_KEEP_DAYS),
    ("compaction.archives.warn_bytes", d.ARCHIVE_WARN_BYTES),
    ("memory_flush.enabled", d.MEMORY_FLUSH_ENABLED),
    ("memory_flush.soft_threshold_tokens", d.MEMORY_FLUSH_SOFT_THRESHOLD_TOKENS),
    ("memory_flush.force_bytes", d.MEMORY_FLUSH_FORCE_BYTES),
    ("memory_flush.hooks", ()),
    ("summarizer.base_url", None),
    ("summarizer.model", None),
    ("summarizer.api_key_env", None),
    ("summarizer.context_tokens", d.SUMMARIZER_CONTEXT_TOKENS),
    ("summarizer.timeout_seconds", d.SUMMARIZER_TIMEOUT_SECONDS),
    ("summarizer.max_concurrency", d.SUMMARIZER_MAX_CONCURRENCY),
    ("summarizer.max_output_tokens", d.SUMMARIZER_MAX_OUTPUT_TOKENS),
    ("summarizer.retry.attempts", d.SUMMARIZER_RETRY_ATTEMPTS),
    ("summarizer.retry.base_seconds", d.SUMMARIZER_RETRY_BASE_SECONDS),
    ("summarizer.retry.max_seconds", d.SUMMARIZER_RETRY_MAX_SECONDS),
    ("summarizer.retry.jitter", d.SUMMARIZER_RETRY_JITTER),
    ("service.rescan_seconds", d.RESCAN_SECONDS),
    ("service.debounce_ms", d.WATCH_DEBOUNCE_MS),
    ("service.step_ms", d.WATCH_STEP_MS),
    ("service.status_refresh_seconds", d.STATUS_REFRESH_SECONDS),
    ("service.backoff_base_seconds", d.BACKOFF_BASE_SECONDS),
    ("service.backoff_max_seconds", d.BACKOFF_MAX_SECONDS),
    ("log_level", "INFO"),
]


def get(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


@pytest.mark.parametrize(("key", "expected"), DEFAULTS_TABLE, ids=[k for k, _ in DEFAULTS_TABLE])
def test_builtin_defaults_come_from_defaults_module(key: str, expected: Any) -> None:
    assert get(load_config(None, env=ENV), key) == expected


def test_no_file_means_defaults_and_no_model() -> None:
    config = load_config(None, env=ENV)
    assert config == Config.defaults(ENV)
    assert config.summarizer.enabled is False
    assert config.models.providers == {}
    assert config.source == "<defaults>"


def test_config_is_frozen() -> None:
    config = load_config(None, env=ENV)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.compaction.reserve_tokens = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.models.providers["x"] = None  # type: ignore[index]


@pytest.mark.parametrize(
    "text", ["", "# only a comment\n", "compaction:\n", "compaction: null\nsummarizer:\n"]
)
def test_empty_file_and_empty_groups_mean_defaults(tmp_path: Path, text: str) -> None:
    assert load_config(write(tmp_path, text), env=ENV) == Config.defaults(ENV)


# --- the example file ---------------------------------------------------------------------------------------


def test_example_file_equals_builtin_defaults() -> None:
    example = load_config(EXAMPLE, env=ENV)
    assert example == Config.defaults(ENV)
    assert example.source == str(EXAMPLE)


def test_example_file_shows_every_key() -> None:
    from compactd import config as c

    text = EXAMPLE.read_text(encoding="utf-8")
    groups = [
        Config,
        c.SessionsConfig,
        c.ModelsConfig,
        c.ProviderConfig,
        c.ModelConfig,
        c.AgentsConfig,
        c.AgentDefaults,
        c.CompactionConfig,
        c.QualityGuardConfig,
        c.ArchivesConfig,
        c.MemoryFlushConfig,
        c.HookConfig,
        c.SummarizerConfig,
        c.RetryConfig,
        c.ServiceConfig,
    ]
    missing = {
        f.name
        for cls in groups
        for f in dataclasses.fields(cls)
        if f.name != "source" and not re.search(rf"(^|[\s{{,]){f.name}:", text, re.M)
    }
    assert missing == set()


def test_example_commented_samples_are_valid(tmp_path: Path) -> None:
    """The samples shown in comments (providers, workspaces, hooks, state_dir) load as written."""
    text = EXAMPLE.read_text(encoding="utf-8")
    text = text.replace(
        "  providers: {}",
        '  providers:\n    ollama:\n      models:\n        "qwen2.5:7b": {context_tokens: 16384}',
    )
    text = text.replace(
        "  workspaces: {}",
        "  workspaces:\n    main: ~/work/assistant\n    ~/.pi/agent/sessions/*: ~/projects/app",
    )
    text = text.replace(
        "  hooks: []",
        "  hooks:\n    - {command: [notify-send, compactd], timeout_seconds: 30}\n"
        '    - {command: "jq . >> ~/compactd-events.log", timeout_seconds: 5}',
    )
    text = text.replace("# state_dir: ~/.local/state/compactd", "state_dir: ~/.local/state/compactd")
    config = load_config(write(tmp_path, text), env={"HOME": "/h"})
    assert config.models.window_for("ollama", "qwen2.5:7b") == 16384
    assert config.agents.workspaces["main"] == "~/work/assistant"
    assert config.memory_flush.hooks[1].command == ("/bin/sh", "-c", "jq . >> ~/compactd-events.log")
    assert config.state_dir == Path("/h/.local/state/compactd")


# --- errors: file, dotted key, what was expected ------------------------------------------------------------

ERRORS: list[tuple[str, str, str, str]] = [
    # (id, yaml, dotted key, fragment of the message)
    ("unknown-top", "compacton: {}\n", "compacton", "unknown key; did you mean compaction?"),
    ("unknown-nested", "compaction:\n  reserve_token: 1000\n", "compaction.reserve_token", "reserve_tokens"),
    ("camel-case", "compaction:\n  reserveTokens: 1000\n", "compaction.reserveTokens", "reserve_tokens"),
    (
        "unknown-no-match",
        "service:\n  zzz: 1\n",
        "service.zzz",
        "valid keys: rescan_seconds, debounce_ms",
    ),
    (
        "model-window-alias",
        "models:\n  providers:\n    ollama:\n      models:\n        qwen3:8b: {context_window: 1}\n",
        'models.providers.ollama.models["qwen3:8b"].context_window',
        "did you mean context_tokens?",
    ),
    (
        "wrong-type-int",
        "compaction:\n  reserve_tokens: lots\n",
        "compaction.reserve_tokens",
        "expected an integer",
    ),
    ("bool-is-not-int", "compaction:\n  reserve_tokens: true\n", "compaction.reserve_tokens", "got true"),
    (
        "float-is-not-int",
        "compaction:\n  keep_recent_turns: 2.5\n",
        "compaction.keep_recent_turns",
        "integer",
    ),
    ("wrong-type-bool", "memory_flush:\n  enabled: 1\n", "memory_flush.enabled", "expected true or false"),
    ("wrong-type-group", "compaction: 5\n", "compaction", "expected a mapping, got an integer"),
    ("roots-string", "sessions:\n  roots: ~/s\n", "sessions.roots", "expected a list of strings"),
    ("roots-empty", "sessions:\n  roots: []\n", "sessions.roots", "at least one glob"),
    ("roots-item", "sessions:\n  roots: [~/a, 3]\n", "sessions.roots[1]", "non-empty string"),
    ("negative-idle", "sessions:\n  idle_seconds: -1\n", "sessions.idle_seconds", "0 or more, got -1"),
    (
        "negative-abandoned-turn",
        "sessions:\n  abandoned_turn_seconds: -2\n",
        "sessions.abandoned_turn_seconds",
        "0 or more, got -2",
    ),
    ("negative-reserve", "compaction:\n  reserve_tokens: -5\n", "compaction.reserve_tokens", "got -5"),
    (
        "zero-window",
        "agents:\n  defaults:\n    context_tokens: 0\n",
        "agents.defaults.context_tokens",
        "positive",
    ),
    ("share-above-1", "compaction:\n  tool_result_share: 1.5\n", "compaction.tool_result_share", "at most 1"),
    ("share-zero", "compaction:\n  tool_result_share: 0\n", "compaction.tool_result_share", "above 0"),
    ("share-negative", "compaction:\n  tool_result_share: -0.1\n", "compaction.tool_result_share", "above 0"),
    ("jitter-above-1", "summarizer:\n  retry: {jitter: 2}\n", "summarizer.retry.jitter", "0 to 1"),
    ("nan", "compaction:\n  tool_result_share: .nan\n", "compaction.tool_result_share", "finite"),
    ("commit", "compaction:\n  commit: rotat\n", "compaction.commit", "one of rotate, append, got 'rotat'"),
    (
        "identifier-policy",
        "compaction:\n  identifier_policy: loose\n",
        "compaction.identifier_policy",
        "one of strict, off, custom",
    ),
    (
        "custom-needs-instructions",
        "compaction:\n  identifier_policy: custom\n",
        "compaction.identifier_instructions",
        "custom",
    ),
    (
        "retries-4",
        "compaction:\n  quality_guard: {max_retries: 4}\n",
        "compaction.quality_guard.max_retries",
        "0 to 3",
    ),
    ("turns-13", "compaction:\n  keep_recent_turns: 13\n", "compaction.keep_recent_turns", "0 to 12, got 13"),
    ("grace", "compaction:\n  rotate_grace_seconds: 0.1\n", "compaction.rotate_grace_seconds", "0.25"),
    ("fill-0", "compaction:\n  target_fill: 0\n", "compaction.target_fill", "0"),
    ("fill-1.5", "compaction:\n  target_fill: 1.5\n", "compaction.target_fill", "1"),
    ("log-level", "log_level: loud\n", "log_level", "one of DEBUG, INFO"),
    (
        "base-url",
        "summarizer:\n  base_url: localhost:11434\n  model: m\n",
        "summarizer.base_url",
        "http(s) URL",
    ),
    ("model-required", "summarizer:\n  base_url: http://127.0.0.1:1/v1\n", "summarizer.model", "model name"),
    ("concurrency", "summarizer:\n  max_concurrency: 0\n", "summarizer.max_concurrency", "at least 1"),
    ("num-ctx", "summarizer:\n  ollama_num_ctx: -3\n", "summarizer.ollama_num_ctx", "positive integer"),
    ("temperature", "summarizer:\n  temperature: 3\n", "summarizer.temperature", "0 to 2"),
    (
        "output-vs-context",
        "summarizer:\n  context_tokens: 4096\n  max_output_tokens: 4096\n",
        "summarizer.max_output_tokens",
        "fewer than summarizer.context_tokens",
    ),
    (
        "backoff",
        "service:\n  backoff_base_seconds: 10\n  backoff_max_seconds: 5\n",
        "service.backoff_max_seconds",
        "at least",
    ),
    (
        "retry-max",
        "summarizer:\n  retry: {base_seconds: 10, max_seconds: 1}\n",
        "summarizer.retry.max_seconds",
        "at least",
    ),
    (
        "hook-missing-command",
        "memory_flush:\n  hooks: [{timeout_seconds: 5}]\n",
        "memory_flush.hooks[0].command",
        "missing",
    ),
    (
        "hook-empty-argv",
        "memory_flush:\n  hooks: [{command: []}]\n",
        "memory_flush.hooks[0].command",
        "non-empty",
    ),
    (
        "hook-timeout",
        "memory_flush:\n  hooks: [{command: x, timeout_seconds: 0}]\n",
        "memory_flush.hooks[0].timeout_seconds",
        "positive",
    ),
    ("hooks-not-list", "memory_flush:\n  hooks: {command: x}\n", "memory_flush.hooks", "expected a list"),
    (
        "sections",
        "compaction:\n  post_compaction_sections: [Red Lines, '']\n",
        "compaction.post_compaction_sections[1]",
        "non-empty",
    ),
    ("state-dir", "state_dir: 5\n", "state_dir", "directory path"),
    (
        "workspace-value",
        "agents:\n  workspaces: {main: 3}\n",
        "agents.workspaces.main",
        "workspace directory",
    ),
    ("provider-key", "models:\n  providers:\n    1: {}\n", "models.providers.1", "string name"),
    ("duplicate", "compaction:\n  commit: append\n  commit: rotate\n", "compaction.commit", "duplicate key"),
    # A reserve no window can hold: the default window, or a cap that lowers every window.
    ("reserve-vs-default", "compaction:\n  reserve_tokens: 200000\n", "compaction.reserve_tokens", "200000"),
    (
        "reserve-vs-cap",
        "compaction:\n  reserve_tokens: 20000\nagents:\n  defaults:\n    context_tokens: 16384\n",
        "compaction.reserve_tokens",
        "(16384, from agents.defaults.context_tokens)",
    ),
]


@pytest.mark.parametrize(("text", "key", "fragment"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_error_names_file_line_dotted_key_and_expectation(
    tmp_path: Path, text: str, key: str, fragment: str
) -> None:
    error = error_for(tmp_path, text)
    matching = [p for p in error.problems if p.key == key]
    assert matching, str(error)
    problem = matching[0]
    assert fragment in problem.message
    assert problem.line is not None and problem.line >= 1
    line = str(error).splitlines()[error.problems.index(problem)]
    assert line.startswith(f"{tmp_path / 'compactd.yaml'}:{problem.line}:{problem.column}: {key}: ")
    assert error.source == str(tmp_path / "compactd.yaml")


def test_every_problem_is_reported_at_once_in_file_order(tmp_path: Path) -> None:
    error = error_for(
        tmp_path, "log_level: loud\ncompaction:\n  commit: x\n  keep_recent_turns: 20\nbogus: 1\n"
    )
    assert [p.key for p in error.problems] == [
        "log_level",
        "compaction.commit",
        "compaction.keep_recent_turns",
        "bogus",
    ]
    assert [p.line for p in error.problems] == [1, 3, 4, 5]


def test_reserve_larger_than_window_is_error_only_when_written(tmp_path: Path) -> None:
    # The default reserve under a small cap is the case the minimum prompt budget exists for: valid.
    config = load_config(write(tmp_path, "agents:\n  defaults:\n    context_tokens: 16384\n"), env=ENV)
    assert config.compaction.reserve_tokens == d.RESERVE_TOKENS
    # A model window larger than the default raises the ceiling for an explicit reserve.
    text = (
        "compaction:\n  reserve_tokens: 300000\n"
        "models:\n  providers:\n    x: {models: {big: {context_tokens: 1000000}}}\n"
    )
    assert load_config(write(tmp_path, text), env=ENV).compaction.reserve_tokens == 300000
    error = error_for(tmp_path, text.replace("1000000", "250000"))
    assert "(250000, from models.providers.x.models.big.context_tokens)" in str(error)


@pytest.mark.parametrize(
    ("text", "fragment", "line"),
    [
        ("compaction:\n  reserve_tokens: [1,\n", "YAML syntax error", 3),
        ("a: b\n\tc: d\n", "YAML syntax error", 2),
        ("compaction:\n  commit: 'rotate\n", "YAML syntax error", 3),
        ("--- {}\n--- {}\n", "YAML syntax error", 2),
    ],
)
def test_yaml_syntax_error_has_line_and_column_and_no_traceback(
    tmp_path: Path, text: str, fragment: str, line: int
) -> None:
    error = error_for(tmp_path, text)
    assert fragment in str(error)
    assert error.problems[0].line == line and error.problems[0].column is not None
    assert str(error).startswith(f"{tmp_path / 'compactd.yaml'}:{line}:")
    assert error.__cause__ is None and error.__suppress_context__


@pytest.mark.parametrize(
    "text",
    ["x: 2024-13-45\n", "- a\n- b\n", "just a string\n", "!!python/object:os.system {}\n", "a: &a [*a]\n"],
)
def test_odd_documents_are_config_errors(tmp_path: Path, text: str) -> None:
    error = error_for(tmp_path, text)
    assert str(error).startswith(str(tmp_path / "compactd.yaml"))


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_config(tmp_path)
    (tmp_path / "latin1.yaml").write_bytes(b"log_level: \xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(tmp_path / "latin1.yaml")


def test_from_mapping_names_the_source_without_lines() -> None:
    with pytest.raises(ConfigError) as info:
        Config.from_mapping({"compaction": {"commit": "sideways"}}, source="inline")
    assert str(info.value) == "inline: compaction.commit: expected one of rotate, append, got 'sideways'"
    assert info.value.key == "compaction.commit"
    with pytest.raises(ConfigError, match="inline: expected a mapping at the top level, got a list"):
        Config.from_mapping([1, 2], source="inline")  # type: ignore[arg-type]


# --- secrets ------------------------------------------------------------------------------------------------


def test_api_key_from_env_at_call_time_never_in_repr(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path, "summarizer:\n  base_url: http://127.0.0.1:8080/v1\n  model: m\n  api_key_env: MY_KEY\n"
        )
    )
    env = {"MY_KEY": SECRET}
    assert config.summarizer.api_key(env) == SECRET
    assert config.summarizer.api_key({}) is None
    assert config.summarizer.api_key({"MY_KEY": "  "}) is None
    for shown in (repr(config), str(config), repr(config.summarizer), str(config.redacted_dict())):
        assert SECRET not in shown
        assert "MY_KEY" in shown  # the name is shown, the value never


def test_api_key_from_file_read_at_call_time(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    text = "summarizer:\n  api_key_env: UNSET_VAR\n  api_key_file: key\n"
    config = load_config(write(tmp_path, text), env={})
    assert config.summarizer.api_key_file == str(tmp_path / "key")  # relative to the config file
    with pytest.raises(ConfigError) as info:
        config.summarizer.api_key({})
    assert "summarizer.api_key_file" in str(info.value) and "No such file" in str(info.value)
    key_file.write_text(SECRET + "\n")
    assert config.summarizer.api_key({}) == SECRET
    key_file.write_text("rotated-key\n")
    assert config.summarizer.api_key({}) == "rotated-key"  # read at call time, not at load
    assert config.summarizer.api_key({"UNSET_VAR": "from-env"}) == "from-env"  # the variable wins
    assert SECRET not in repr(config) and "rotated-key" not in repr(config)


def test_api_key_file_error_never_shows_the_key(tmp_path: Path) -> None:
    key_dir = tmp_path / SECRET  # even a path that looks like a key is only named as a path, never read
    key_dir.mkdir()
    config = Config.from_mapping({"summarizer": {"api_key_file": str(key_dir)}}, env={})
    with pytest.raises(ConfigError) as info:
        config.summarizer.api_key({})
    assert info.value.key == "summarizer.api_key_file"


@pytest.mark.parametrize(
    "text",
    [
        f"summarizer:\n  api_key_env: {SECRET}\n",  # the key pasted where its variable's name belongs
        f"summarizer:\n  api_key: {SECRET}\n",  # an unknown key holding a secret
        f"summarizer:\n  base_url: https://user:{SECRET}@api.example.com/v1\n  model: m\n",
        f"summarizer:\n  model: [{SECRET}\n",  # a syntax error on the line holding it
        f"summarizer:\n  api_key_file: {{k: {SECRET}}}\n",
        f"summarizer:\n  api_key_env: 42\n  model: {{x: {SECRET}}}\n",
        f"log_level: {{level: {SECRET}}}\n",
        f"compaction:\n  identifier_instructions: [{SECRET}]\n",
    ],
)
def test_secrets_never_in_error_messages(tmp_path: Path, text: str) -> None:
    error = error_for(tmp_path, text)
    assert SECRET not in str(error)
    assert SECRET not in repr(error.problems)


def test_hook_commands_are_masked_when_shown(tmp_path: Path) -> None:
    text = f'memory_flush:\n  hooks:\n    - {{command: [curl, -H, "Authorization: Bearer {SECRET}", http://x]}}\n'
    config = load_config(write(tmp_path, text), env=ENV)
    assert config.memory_flush.hooks[0].command[2].endswith(SECRET)  # the runner gets the real argv
    assert SECRET not in repr(config)
    assert SECRET not in str(config.redacted_dict())


def test_redacted_dict_is_plain_json() -> None:
    import json

    shown = json.loads(json.dumps(load_config(None, env=ENV).redacted_dict()))
    assert shown["compaction"]["commit"] == "rotate"
    assert shown["sessions"]["roots"] == list(d.SESSION_ROOTS)
    assert shown["state_dir"] == "/home/tester/.local/state/compactd"


# --- state directory ----------------------------------------------------------------------------------------

STATE_DIRS: list[tuple[dict[str, str], str | None, str]] = [
    ({"HOME": "/home/u"}, None, "/home/u/.local/state/compactd"),
    ({"HOME": "/home/u", "XDG_STATE_HOME": "/xdg"}, None, "/xdg/compactd"),
    ({"HOME": "/home/u", "XDG_STATE_HOME": "relative/xdg"}, None, "/home/u/.local/state/compactd"),
    ({"HOME": "/home/u", "XDG_STATE_HOME": ""}, None, "/home/u/.local/state/compactd"),
    (
        {"HOME": "/home/u", "XDG_STATE_HOME": "/xdg", "STATE_DIRECTORY": "/var/lib/compactd"},
        None,
        "/var/lib/compactd",
    ),
    ({"STATE_DIRECTORY": "/var/lib/compactd:/var/lib/other"}, None, "/var/lib/compactd"),
    ({"HOME": "/home/u", "STATE_DIRECTORY": "/var/lib/compactd"}, "~/mine", "/home/u/mine"),
    ({"HOME": "/home/u"}, "/abs/state", "/abs/state"),
]


@pytest.mark.parametrize(("env", "configured", "expected"), STATE_DIRS)
def test_state_dir_resolution(env: dict[str, str], configured: str | None, expected: str) -> None:
    assert resolve_state_dir(env, configured) == Path(expected)
    data = {} if configured is None else {"state_dir": configured}
    assert Config.from_mapping(data, env=env).state_dir == Path(expected)


def test_state_dir_relative_to_config_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "state_dir: state\n"), env=ENV)
    assert config.state_dir == tmp_path / "state"


def test_state_dir_resolved_at_load_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "a"))
    config = load_config(None)
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "b"))
    assert config.state_dir == tmp_path / "a"
    assert load_config(None).state_dir == tmp_path / "b"


# --- paths, models, workspaces, hooks -----------------------------------------------------------------------


def test_roots_expand_home_at_use(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "sessions:\n  roots: [~/s/*, /abs/x, rel/*]\n"), env=ENV)
    assert config.sessions.roots == ("~/s/*", "/abs/x", str(tmp_path / "rel/*"))


def test_expand_user() -> None:
    assert expand_user("~", {"HOME": "/h"}) == "/h"
    assert expand_user("~/x", {"HOME": "/h"}) == "/h/x"
    assert expand_user("/a/~/b", {"HOME": "/h"}) == "/a/~/b"
    assert expand_user("x~", {"HOME": "/h"}) == "x~"


def test_model_windows(tmp_path: Path) -> None:
    text = (
        "models:\n  providers:\n"
        "    ollama:\n      models:\n        'qwen2.5:7b': {context_tokens: 16384}\n        bare: {}\n"
        "    openrouter:\n      models:\n        'qwen2.5:7b': {context_tokens: 32768}\n"
    )
    models = load_config(write(tmp_path, text), env=ENV).models
    assert models.window_for("ollama", "qwen2.5:7b") == 16384
    assert models.window_for("openrouter", "qwen2.5:7b") == 32768
    assert models.window_for(None, "qwen2.5:7b") == 16384  # unknown provider: the smallest, the safe side
    assert models.window_for("elsewhere", "qwen2.5:7b") == 16384
    assert models.window_for("ollama", "bare") is None  # listed without a window
    assert models.window_for("ollama", "other") is None
    assert models.window_for("ollama", None) is None


def test_workspaces_by_agent_id_then_glob(tmp_path: Path) -> None:
    text = "agents:\n  workspaces:\n    main: ~/ws/main\n    ~/.pi/agent/sessions/*: /ws/pi\n    rel/*: ws\n"
    agents = load_config(write(tmp_path, text), env=ENV).agents
    home = {"HOME": "/h"}
    oc = "/h/.openclaw/agents/main/sessions/abc.jsonl"
    assert agent_id_for(oc) == "main"
    assert agent_id_for("/h/.pi/agent/sessions/--x--/s.jsonl") is None
    assert agents.workspace_for(oc, env=home) == Path("/h/ws/main")
    assert agents.workspace_for("/h/.openclaw/agents/other/sessions/a.jsonl", env=home) is None
    assert agents.workspace_for("/h/.pi/agent/sessions/--x--/s.jsonl", env=home) == Path("/ws/pi")
    assert agents.workspace_for("/h/.pi/agent/sessions/--x--/s.jsonl", agent_id="main", env=home) == Path(
        "/h/ws/main"
    )
    assert agents.workspace_for(tmp_path / "rel" / "d" / "s.jsonl", env=home) == tmp_path / "ws"


_PATH_PARTS = st.sampled_from(
    ["h", ".openclaw", "agents", "main", "sessions", ".pi", "--x--", "a.jsonl", "*", ".."]
)


@given(parts=st.lists(_PATH_PARTS, min_size=1, max_size=7), agent=st.none() | st.sampled_from(["main", "*"]))
@settings(max_examples=200, deadline=None)
def test_no_workspaces_configured_is_none_for_any_session(parts: list[str], agent: str | None) -> None:
    """Without ``agents.workspaces`` no session has a configured workspace: answered before the agent id and
    the directory are worked out, as the whole lookup answers."""
    from compactd.config import AgentsConfig

    path = "/" + "/".join(parts)
    assert AgentsConfig().workspace_for(path, agent_id=agent) is None
    assert AgentsConfig().workspace_for(path, agent_id=agent, env={"HOME": "/h"}) is None


def test_hooks_and_num_ctx(tmp_path: Path) -> None:
    text = (
        "memory_flush:\n  hooks:\n    - {command: [/usr/bin/notify, x]}\n    - command: echo hi | wc\n"
        "      timeout_seconds: 2.5\n"
        "summarizer:\n  ollama_num_ctx: true\n  context_tokens: 8192\n  max_output_tokens: 1024\n"
    )
    config = load_config(write(tmp_path, text), env=ENV)
    first, second = config.memory_flush.hooks
    assert (
        first.command == ("/usr/bin/notify", "x") and first.timeout_seconds == d.MEMORY_HOOK_TIMEOUT_SECONDS
    )
    assert second.command == ("/bin/sh", "-c", "echo hi | wc") and second.timeout_seconds == 2.5
    assert config.summarizer.num_ctx() == 8192
    assert Config.from_mapping({"summarizer": {"ollama_num_ctx": 4096}}).summarizer.num_ctx() == 4096
    assert Config.defaults(ENV).summarizer.num_ctx() is None


def test_values_are_normalised(tmp_path: Path) -> None:
    text = (
        "log_level: debug\nsessions:\n  idle_seconds: 5\n"
        "compaction:\n  tool_result_share: 1\n  reserve_tokens: 20_000\n"
    )
    config = load_config(write(tmp_path, text), env=ENV)
    assert config.log_level == "DEBUG"
    assert config.sessions.idle_seconds == 5.0 and isinstance(config.sessions.idle_seconds, float)
    assert config.compaction.tool_result_share == 1.0
    assert config.compaction.reserve_tokens == 20000


def test_summarizer_configured(tmp_path: Path) -> None:
    text = "summarizer:\n  base_url: http://127.0.0.1:11434/v1\n  model: qwen2.5:7b\n  temperature: 0\n"
    summarizer = load_config(write(tmp_path, text), env=ENV).summarizer
    assert summarizer.enabled and summarizer.model == "qwen2.5:7b" and summarizer.temperature == 0.0


# --- never a traceback --------------------------------------------------------------------------------------

yaml_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True), st.text(max_size=12)
)
yaml_values = st.recursive(
    yaml_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=12,
)
known_keys = st.sampled_from(
    [
        "sessions",
        "models",
        "agents",
        "compaction",
        "memory_flush",
        "summarizer",
        "service",
        "state_dir",
        "log_level",
    ]
)
config_like = st.dictionaries(
    known_keys, yaml_values | st.dictionaries(st.text(max_size=20), yaml_values), max_size=4
)


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=config_like)
def test_from_mapping_only_ever_raises_config_error(data: dict[str, Any]) -> None:
    try:
        Config.from_mapping(data, env=ENV)
    except ConfigError as exc:
        assert str(exc).startswith("<file>")


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200) | config_like.map(lambda m: yaml.safe_dump(m, allow_unicode=True)))
def test_load_config_only_ever_raises_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.yaml"
    try:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    except UnicodeEncodeError:
        return
    try:
        load_config(path, env=ENV)
    except ConfigError as exc:
        assert str(exc).startswith(str(path))


def test_environment_is_not_consulted_when_given() -> None:
    assert "NOT_A_REAL_HOME" not in os.environ.get("HOME", "")
    assert Config.defaults({"HOME": "/NOT_A_REAL_HOME"}).state_dir == Path(
        "/NOT_A_REAL_HOME/.local/state/compactd"
    )


def test_ignore_globs_match_base_names(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "sessions:\n  ignore: ['*-scratch.jsonl', 'tmp*']\n"), env=ENV)
    assert config.sessions.is_ignored("/s/a-scratch.jsonl")
    assert config.sessions.is_ignored(Path("/s/tmp1.jsonl"))
    assert not config.sessions.is_ignored("/tmp1/a.jsonl")
    assert not Config.defaults(ENV).sessions.is_ignored("/s/a-scratch.jsonl")


# --- files that are not configurations (issue 9, item 7) ----------------------------------------------------


def load_in_child(path: Path, *, key: bool = False) -> subprocess.CompletedProcess[str]:
    """``load_config`` (and the key file, with ``key``) in a child with 1 GiB of address space and a deadline,
    so a config that hangs or grows without bound fails this test instead of hanging or exhausting the host."""
    limit = 1 << 30
    code = (
        "import sys\n"
        "from compactd.config import ConfigError, load_config\n"
        "try:\n"
        "    config = load_config(sys.argv[1])\n"
        "    if sys.argv[2] == 'key':\n"
        "        config.summarizer.api_key({})\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(2)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(path), "key" if key else "config"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )


def test_a_fifo_or_a_device_as_the_config_is_refused_at_once_naming_the_file(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)  # nobody ever writes to it: opening it for reading would block for ever
    done = load_in_child(fifo)
    assert done.returncode == 2, done.stderr
    assert done.stdout.startswith(f"{fifo}: cannot read configuration: not a regular file (a FIFO)")
    done = load_in_child(Path("/dev/zero"))  # endless: read whole, it grows until the process is killed
    assert done.returncode == 2, done.stderr
    assert done.stdout.startswith(
        "/dev/zero: cannot read configuration: not a regular file (a character device)"
    )
    key_file = tmp_path / "key"
    os.mkfifo(key_file)
    config = write(
        tmp_path, f"summarizer:\n  base_url: http://127.0.0.1:9/v1\n  model: m\n  api_key_file: {key_file}\n"
    )
    done = load_in_child(config, key=True)
    assert done.returncode == 2, done.stderr
    assert f"cannot read the key file {key_file}: not a regular file (a FIFO)" in done.stdout


def test_a_config_over_1_mib_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    head = "log_level: warning\n"
    padding = "# " + "x" * 1021 + "\n"  # 1 KiB of comment per line
    at_limit = write(tmp_path, head + padding * ((CONFIG_MAX_BYTES - len(head)) // 1024), "at-limit.yaml")
    with at_limit.open("a") as handle:
        handle.write("#" * (CONFIG_MAX_BYTES - at_limit.stat().st_size - 1) + "\n")
    assert at_limit.stat().st_size == CONFIG_MAX_BYTES == 1 << 20
    assert load_config(at_limit, env=ENV).log_level == "WARNING"
    over = write(tmp_path, at_limit.read_text() + "#\n", "over.yaml")
    with pytest.raises(ConfigError) as info:
        load_config(over, env=ENV)
    assert str(info.value).startswith(f"{over}: cannot read configuration: larger than 1 MiB")


# --- service.metrics_textfile -------------------------------------------------------------------------------


def test_metrics_textfile_defaults_to_the_state_dir_and_takes_an_absolute_prom_path(tmp_path: Path) -> None:
    assert Config.defaults(ENV).service.metrics_textfile is None
    collector = tmp_path / "textfile_collector"
    collector.mkdir()
    text = f"service:\n  metrics_textfile: {collector / 'compactd.prom'}\n"
    config = load_config(write(tmp_path, text), env=ENV)
    assert config.service.metrics_textfile == collector / "compactd.prom"
    home = {"HOME": str(tmp_path)}
    tilde = load_config(
        write(tmp_path, "service:\n  metrics_textfile: ~/textfile_collector/c.prom\n"), env=home
    )
    assert tilde.service.metrics_textfile == collector / "c.prom"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("rel/compactd.prom", "expected an absolute path"),
        ("{dir}/compactd.txt", "ending in .prom"),
        ("{dir}/.prom", "ending in .prom"),
        ("{dir}/missing/compactd.prom", "does not exist"),
        ("42", "expected an absolute path ending in .prom"),
    ],
)
def test_a_bad_metrics_textfile_is_reported_at_its_line(tmp_path: Path, value: str, expected: str) -> None:
    text = "service:\n  rescan_seconds: 60\n  metrics_textfile: " + value.format(dir=tmp_path) + "\n"
    error = error_for(tmp_path, text)
    [problem] = error.problems
    assert problem.key == "service.metrics_textfile" and problem.line == 3
    assert expected in problem.message
