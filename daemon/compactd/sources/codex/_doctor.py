"""``compactd doctor``'s Codex lines: where its rollouts are, whether compactd can tell a live session, the
fullest session's figure against its window, and whether the PreCompact hook and the compact prompt are set up."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from compactd.config import Config
from compactd.sources.codex._files import LOCK_DIR, Cursor, codex_home, find_rollouts, read_new
from compactd.sources.codex._hook import PROMPT_FILE_NAME
from compactd.sources.codex._rollout import RolloutFigures, parse_rollout_line

__all__ = ["check_codex"]

# The newest rollouts doctor reads for the figures (each one whole): enough to find a full session.
DOCTOR_ROLLOUTS = 50


def _figures(path: str) -> RolloutFigures:
    figures = RolloutFigures()
    lines, _ = read_new(path, Cursor())
    for raw in lines:
        parsed = parse_rollout_line(raw)
        if parsed is not None:
            figures.apply(parsed)
    return figures


def check_codex(
    config: Config,
    env: Mapping[str, str],
    ok: Callable[[str], None],
    bad: Callable[[str, str], None],
    warn: Callable[[str, str], None],
) -> int:
    """Report on the Codex home; returns the number of problems (a missing home is none)."""
    if not config.codex.enabled:
        ok("Codex: disabled (codex.enabled: false)")
        return 0
    home = codex_home(env, config.codex.home)
    if not os.path.isdir(os.path.join(home, "sessions")):
        ok(f"Codex: no rollouts under {home}/sessions (nothing to serve)")
        return 0
    rollouts = find_rollouts(home)
    compressed = sum(1 for p in rollouts if p.endswith(".zst"))
    ok(f"Codex: {len(rollouts)} rollout(s) under {home}/sessions ({compressed} compressed, read only)")
    problems = 0
    if not os.path.isdir(os.path.join(home, LOCK_DIR)):
        problems += 1
        bad(
            f"Codex: {home}/{LOCK_DIR} is missing: compactd cannot tell an open session and compacts none",
            "run Codex once with this CODEX_HOME (0.169 creates it), or set codex.enabled: false",
        )
    fullest: tuple[float, str, RolloutFigures] | None = None
    for path in sorted(rollouts, key=os.path.basename)[-DOCTOR_ROLLOUTS:]:
        try:
            figures = _figures(path)
        except (OSError, ValueError) as exc:
            warn(f"Codex: {path} cannot be read: {exc}", "check its owner and mode")
            continue
        if figures.figure is not None and figures.window:
            fill = figures.figure / figures.window
            if fullest is None or fill > fullest[0]:
                fullest = (fill, path, figures)
    if fullest is not None:
        fill, path, figures = fullest
        ok(
            f"Codex: fullest session {os.path.basename(path)}: {figures.figure} of {figures.window} tokens ({fill:.0%})"
        )
    try:
        with open(os.path.join(home, "hooks.json"), "rb") as handle:
            hooked = b"codex-precompact" in handle.read(1 << 20)
    except OSError:
        hooked = False
    if hooked:
        ok("Codex: the PreCompact hook runs compactd's memory flush")
    else:
        warn(
            "Codex: no PreCompact hook runs `compactd hook codex-precompact`: Codex's own compactions flush no memories",
            f"add it to {home}/hooks.json (README: Codex) and review it in Codex's /hooks",
        )
    if not os.path.isfile(os.path.join(home, PROMPT_FILE_NAME)):
        warn(
            "Codex: compactd's compact prompt is not installed",
            f'`compactd hook codex-prompt`, then experimental_compact_prompt_file = "{home}/{PROMPT_FILE_NAME}"',
        )
    return problems
