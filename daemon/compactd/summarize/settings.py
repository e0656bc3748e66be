"""The engine's settings and the summarizer client, from the config: what every source's compaction and
memory flush are given (the file job, OpenClaw's flush, Codex's appended compaction, ``summarize``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from compactd.config import Config
from compactd.summarize.engine import EngineSettings

if TYPE_CHECKING:
    import anyio

__all__ = ["engine_settings", "make_client"]

log = logging.getLogger(__name__)


def engine_settings(config: Config, provider: str | None = None, model: str | None = None) -> EngineSettings:
    """The engine's settings for a session of this model: pi's own keepRecentTokens where the user set it."""
    c = config.compaction
    pi = config.pi.settings
    keep_recent = pi.for_model(provider, model)[1] if pi is not None else None
    return EngineSettings(
        keep_recent_turns=c.keep_recent_turns,
        keep_recent_tokens=c.keep_recent_tokens if keep_recent is None else keep_recent,
        identifier_policy=c.identifier_policy,
        identifier_instructions=c.identifier_instructions,
        identifier_cap=c.identifier_cap,
        quality_guard=c.quality_guard.enabled,
        quality_retries=c.quality_guard.max_retries,
        summary_max_chars=c.summary_max_chars,
        redact=c.redact_secrets,
        post_compaction_sections=c.post_compaction_sections,
        post_compaction_max_chars=c.post_compaction_max_chars,
        summarizer_window=config.summarizer.context_tokens,
        max_output_tokens=config.summarizer.max_output_tokens,
    )


def make_client(config: Config, limiter: anyio.CapacityLimiter | None = None) -> Any:
    """The summarizer client, or None when no endpoint is configured (the digest is used)."""
    s = config.summarizer
    if not s.enabled or s.base_url is None:
        return None
    from compactd.summarize.llm import RetryPolicy, SummarizerClient
    from compactd.summarize.pace import SpeedMemory

    for deprecation in s.deprecations():
        log.warning("config: %s", deprecation)
    return SummarizerClient(
        base_url=s.base_url,
        model=s.model or "default",
        api_key=s.api_key() or "sk-local",
        timeout_seconds=s.timeout_seconds,
        context_tokens=s.context_tokens,
        max_output_tokens=s.max_output_tokens,
        temperature=s.temperature,
        ollama_num_ctx=s.num_ctx(),
        api=s.api,
        keep_alive=s.keep_alive,
        max_concurrency=s.max_concurrency,
        limiter=limiter,
        retry=RetryPolicy(
            attempts=s.retry.attempts,
            base_seconds=s.retry.base_seconds,
            max_seconds=s.retry.max_seconds,
            jitter=s.retry.jitter,
        ),
        speed_memory=SpeedMemory(config.state_dir),  # each call is sized to the speed measured before
    )
