"""compactd's configuration: one YAML file, validated once into one frozen, typed object.

Every problem in a file is reported at once as a :class:`ConfigError` naming the file, the line, the dotted
key and what was expected, so an operator fixes a config in one pass and never reads a traceback.

A facade over :mod:`._schema` (the dataclasses), :mod:`._validate` and :mod:`._parsers` (validation with
positions), :mod:`._checks` (checks across fields), :mod:`._load` (YAML with line numbers) and :mod:`._env`
(paths, the environment, bounded reads), so ``from compactd.config import ...`` keeps working.
"""

from __future__ import annotations

from compactd.config._env import (
    CONFIG_MAX_BYTES,
    KEY_FILE_MAX_BYTES,
    agent_id_for,
    expand_user,
    file_kind,
    read_small_file,
    resolve_state_dir,
)
from compactd.config._load import load_config
from compactd.config._parsers import HOOK_SHELL, LogLevel
from compactd.config._schema import (
    LOG_LEVEL,
    SUMMARIZER_OLLAMA_NUM_CTX,
    SUMMARIZER_TEMPERATURE,
    AgentDefaults,
    AgentsConfig,
    ArchivesConfig,
    CodexConfig,
    CommitMode,
    CompactionConfig,
    Config,
    HookConfig,
    IdentifierPolicy,
    MemoryFlushConfig,
    ModelConfig,
    ModelsConfig,
    OpenClawConfig,
    PiConfig,
    ProviderConfig,
    QualityGuardConfig,
    RetryConfig,
    ServiceConfig,
    SessionsConfig,
    SummarizerConfig,
    SummarizerFallback,
)
from compactd.config._validate import ConfigError, ConfigProblem

__all__ = [
    "CONFIG_MAX_BYTES",
    "HOOK_SHELL",
    "KEY_FILE_MAX_BYTES",
    "LOG_LEVEL",
    "SUMMARIZER_OLLAMA_NUM_CTX",
    "SUMMARIZER_TEMPERATURE",
    "AgentDefaults",
    "AgentsConfig",
    "ArchivesConfig",
    "CodexConfig",
    "CommitMode",
    "CompactionConfig",
    "Config",
    "ConfigError",
    "ConfigProblem",
    "HookConfig",
    "IdentifierPolicy",
    "LogLevel",
    "MemoryFlushConfig",
    "ModelConfig",
    "ModelsConfig",
    "OpenClawConfig",
    "PiConfig",
    "ProviderConfig",
    "QualityGuardConfig",
    "RetryConfig",
    "ServiceConfig",
    "SessionsConfig",
    "SummarizerConfig",
    "SummarizerFallback",
    "agent_id_for",
    "expand_user",
    "file_kind",
    "load_config",
    "read_small_file",
    "resolve_state_dir",
]
