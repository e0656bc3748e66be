"""Checks across fields, run once every field is valid on its own."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from compactd import defaults as d
from compactd.config._env import expand_user
from compactd.config._validate import _Ctx, _dotted
from compactd.roots import literal_base, pattern_may_match

if TYPE_CHECKING:
    from compactd.config._schema import Config


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
        # explicit value is checked, so a default reserve under a small cap still works (design.md §6.3).
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
