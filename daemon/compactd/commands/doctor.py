"""``compactd doctor``: what would stop compactd from working here, and what to do about each."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import TextIO

import anyio

from compactd.config import Config, ConfigError, load_config
from compactd.display import display_name
from compactd.sources.watch import discover_roots, scan_root

__all__ = ["run_doctor"]

# A session header is one line of at most a few hundred bytes; junk before it is rare.
HEADER_READ_BYTES = 64 * 1024

# Past this many sessions with one kind of problem the rest are counted, not listed.
MAX_LISTED = 20


# Every line goes through one of these: a finding is one line, whatever the path or key it names holds.


def _ok(out: TextIO, text: str) -> None:
    out.write(f"ok    {display_name(text)}\n")


def _note(out: TextIO, text: str) -> None:
    out.write(f"note  {display_name(text)}\n")


def _bad(out: TextIO, text: str, fix: str) -> None:
    out.write(f"FIX   {display_name(text)}\n      → {display_name(fix)}\n")


def _warn(out: TextIO, text: str, fix: str) -> None:
    out.write(f"WARN  {display_name(text)}\n      → {display_name(fix)}\n")


def _openclaw_databases(config: Config) -> int:
    """How many OpenClaw 2026.9+ agents (SQLite, no sessions directory needed) compactd follows."""
    from compactd.sources.openclaw import discover

    if not config.openclaw.enabled:
        return 0
    oc = config.openclaw
    return len(discover(os.environ, state_dir=oc.state_dir, config_path=oc.config_path).agents)


def check_roots(config: Config, out: TextIO) -> int:
    problems = 0
    roots, refused = discover_roots(config.sessions.roots, state_dir=config.state_dir)
    for refusal in refused:
        problems += 1
        _bad(
            out,
            f"{refusal.path} (from {refusal.pattern}) is not used as a sessions root: {refusal.reason}",
            "remove the symlink or name the real directory in sessions.roots",
        )
    if not roots and _openclaw_databases(config):
        _ok(
            out,
            f"no sessions directory matches {list(config.sessions.roots)}; OpenClaw 2026.9+ agents are served",
        )
    elif not roots:
        problems += 1
        _bad(
            out,
            f"no sessions directory matches {list(config.sessions.roots)}",
            "set sessions.roots to your agents' sessions dirs",
        )
    for root in roots:
        count = len(scan_root(root))
        if not os.access(root, os.R_OK | os.X_OK):
            problems += 1
            _bad(out, f"{root}: not readable", "run compactd as the user who owns the sessions")
        elif not os.access(root, os.W_OK):
            problems += 1
            _bad(
                out,
                f"{root}: not writable (commits would fail)",
                "fix permissions or ReadWritePaths= in the unit",
            )
        else:
            _ok(out, f"{root}: {count} transcripts, readable and writable")
    return problems


def _header(path: str) -> dict[str, object] | None:
    """The session header from the start of a transcript (doctor needs only its ``cwd``)."""
    from compactd.core.reader import parse_transcript

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            head = handle.read(HEADER_READ_BYTES)
    except OSError:
        return None
    return parse_transcript(head[: head.rfind(b"\n") + 1], check=False).header


def check_workspaces(config: Config, roots: list[str], out: TextIO) -> None:
    """Say which sessions run without workspace features, and why (a refused ``cwd`` is not a fault)."""
    from compactd.workspace import choose_workspace

    for root in roots:
        for path in scan_root(root):
            choice = choose_workspace(config, path, _header(path), log_refusal=False)
            if choice.reason is not None:
                _note(
                    out,
                    f"{path}: cwd {choice.cwd!r} is not used as its workspace (no AGENTS.md rules, "
                    f"no memory/): {choice.reason}",
                )


def check_sessions(config: Config, out: TextIO) -> int:
    """Each transcript read and judged as the daemon does: those it cannot read and those it would skip
    (a window under the hard minimum) are things to fix, not "fits"; then the failures the daemon recorded."""
    from compactd.core.decision import Figures, decide
    from compactd.sources.files.tracker import SessionTracker
    from compactd.sources.openclaw import refusal as openclaw_refusal
    from compactd.state import describe_error, read_status

    unreadable: list[str] = []
    skipped: list[str] = []
    reported: set[str] = set()
    for root in discover_roots(config.sessions.roots, state_dir=config.state_dir)[0]:
        for path in scan_root(root):
            if config.sessions.is_ignored(path) or openclaw_refusal(path):
                continue  # a SQLite-backed agent's leftover .jsonl: the OpenClaw lines say why
            tracker = SessionTracker(path)
            try:
                tracker.refresh()
            except Exception as exc:
                unreadable.append(f"{path}: cannot read it: {describe_error(exc)}")
                reported.add(path)
                continue
            ledger = tracker.ledger
            if ledger is None:
                continue
            figures = Figures.of_ledger(ledger, size=tracker.cursor.size, mtime=tracker.cursor.mtime)
            reason = decide(config, figures, now=time.time()).skip
            if reason is not None:
                skipped.append(f"{path}: skipped: {reason}")
                reported.add(path)
    failing: list[str] = []
    status = read_status(config.state_dir, on_problem=lambda _text: None)
    for row in (status or {}).get("sessions", []):
        path, error = row.get("path"), row.get("last_error")
        if isinstance(error, str) and error and path not in reported:
            stage = row.get("error_stage") or "last attempt"
            failing.append(f"{path}: {stage} failed: {error}")
    _list(out, unreadable, "run compactd as the user who owns the sessions, or fix the file's permissions")
    _list(
        out,
        skipped,
        "set the model's real window under models.providers.<provider>.models.<model>.context_tokens "
        "(and agents.defaults.context_tokens) to at least 16,000",
    )
    _list(out, failing, "see `compactd status`; the session is retried after its back-off")
    return len(unreadable) + len(skipped) + len(failing)


def _list(out: TextIO, lines: list[str], fix: str) -> None:
    for line in lines[:MAX_LISTED]:
        _bad(out, line, fix)
    if len(lines) > MAX_LISTED:
        out.write(f"      ... and {len(lines) - MAX_LISTED:,} more like these\n")


def check_pi(config: Config, out: TextIO, env: Mapping[str, str]) -> int:
    """Which pi serves this host and which of its compaction settings compactd takes as thresholds."""
    from compactd.pi_settings import find_pi

    found = find_pi(env)
    if found is None:
        _ok(out, "no pi on PATH: each session follows the rules of the pi that wrote it (design.md §6.14)")
    else:
        package, version, executable = found
        rules = "pi 1.x" if not version.startswith("0.") else "pi 0.73"
        _ok(
            out,
            f"pi on PATH: {package} {version} ({executable}); the sessions it writes follow {rules} rules "
            "(a session says which pi wrote it: `compactd inspect FILE` names the rules and why)",
        )
    settings = config.pi.settings
    if settings is None:
        return 0
    if settings.empty:
        _ok(out, f"pi settings {settings.source}: no compaction thresholds set; compactd's own apply")
    else:
        parts = [
            f"{name}={value}"
            for name, value in (
                ("reserveTokens", settings.reserve_tokens),
                ("keepRecentTokens", settings.keep_recent_tokens),
            )
            if value is not None
        ]
        parts += [f"modelOverrides[{key}]" for key in settings.overrides]
        _ok(out, f"pi settings {settings.source}: {', '.join(parts)} are the thresholds where they apply")
    for problem in settings.problems:
        _warn(out, f"pi settings {settings.source}: {problem}", "fix pi's settings.json (pi refuses it too)")
    return 0


def check_state_dir(config: Config, out: TextIO) -> int:
    state = config.state_dir
    try:
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe = state / ".doctor-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        _bad(
            out,
            f"state directory {state}: {exc.strerror}",
            "set state_dir or StateDirectory= to a writable place",
        )
        return 1
    _ok(out, f"state directory {state} is writable")
    return 0


# Archives taking more than this share of their filesystem are worth a warning whatever warn_bytes says.
ARCHIVE_WARN_FS_SHARE = 0.10


def check_archives(config: Config, out: TextIO) -> int:
    """The archives' disk use against ``compaction.archives.warn_bytes`` and a share of their filesystem."""
    from compactd.state import archive_usage, human_bytes

    usage = archive_usage(config.state_dir)
    settings = config.compaction.archives
    policy = f"kept {settings.keep_days:g} days" if settings.keep_days > 0 else "kept for ever"
    if settings.keep_count > 0:
        policy += f", at most {settings.keep_count} per session"
    summary = (
        f"archives: {usage.count} of {usage.sessions} session(s), {human_bytes(usage.disk_bytes)} on disk"
    )
    fix = (
        "lower compaction.archives.keep_days (or set keep_count, which deletes lines that exist nowhere "
        "else), or move the sessions to a larger disk"
    )
    problems = 0
    if usage.disk_bytes > settings.warn_bytes:
        problems += 1
        _warn(out, f"{summary}, more than warn_bytes ({human_bytes(settings.warn_bytes)}); {policy}", fix)
    for used, sample in usage.by_device.values():
        try:
            fs = os.statvfs(sample)
        except OSError:
            continue
        total = fs.f_blocks * fs.f_frsize
        if total and used > ARCHIVE_WARN_FS_SHARE * total:
            problems += 1
            share = 100.0 * used / total
            _warn(
                out, f"archives take {share:.0f} % of the filesystem holding {os.path.dirname(sample)}", fix
            )
    if not problems:
        _ok(out, f"{summary} ({policy})")
    return problems


def check_summarizer(config: Config, out: TextIO) -> int:
    s = config.summarizer
    if not s.enabled:
        _ok(out, "no summarizer configured: compaction uses the deterministic digest")
        return 0
    from compactd.summarize.settings import make_client

    async def probe() -> object:
        client = make_client(config)
        try:
            return await client.check()
        finally:
            await client.close()

    for deprecation in s.deprecations():
        _warn(out, f"config: {deprecation}", "remove summarizer.ollama_num_ctx from the config")
    result = anyio.run(probe)
    problems = list(getattr(result, "problems", ()))
    for note in getattr(result, "notes", ()):
        _note(out, note)
    window = getattr(result, "context_tokens", None) or s.context_tokens
    cuts = check_summarizer_cuts(config, out)
    if problems:
        for problem in problems:
            _bad(out, f"summarizer: {problem}", "see README, section Ollama and llama.cpp")
        return len(problems)
    _ok(out, f"summarizer {s.base_url} serves {s.model} with a {window:,}-token context")
    return cuts + check_summarizer_speed(config, out, window=window)


def check_summarizer_cuts(config: Config, out: TextIO) -> int:
    """A prompt the endpoint cut (it answered from fewer tokens than were sent), as the speed memory noted it:
    compactd dropped that answer and re-chunked; the server's context is smaller than it said or was thought."""
    from compactd.summarize.pace import SpeedMemory, endpoint_key

    s = config.summarizer
    assert s.base_url is not None
    cut = SpeedMemory(config.state_dir).cut(endpoint_key(s.base_url, s.model or "default"))
    if cut is None:
        return 0
    _warn(
        out,
        f"summarizer: the endpoint cut {cut.get('count', 1)} prompt(s) without an error (latest {cut.get('at')}: "
        f"answered from {cut.get('reported')} prompt tokens of about {cut.get('sent')} sent); compactd dropped "
        "those answers and re-chunked to what the server kept",
        "give the model a larger context on the server (OLLAMA_CONTEXT_LENGTH, a Modelfile num_ctx, llama-server "
        "-c) or lower summarizer.context_tokens; see README, section Ollama and llama.cpp",
    )
    return 0


def check_summarizer_speed(config: Config, out: TextIO, *, window: int | None = None) -> int:
    """The speed compactd measured for the endpoint, and the call it implies within the window and the
    timeout (``compactd.summarize.pace``); a warning when even a minimal summary call cannot fit the timeout."""
    from compactd.summarize import prompts
    from compactd.summarize.pace import (
        OUTPUT_FLOOR_TOKENS,
        PACE_SHARE,
        Pace,
        SpeedMemory,
        call_fit,
        endpoint_key,
        estimate_prompt_tokens,
    )

    s, c = config.summarizer, config.compaction
    assert s.base_url is not None
    window = window or s.context_tokens
    speed = SpeedMemory(config.state_dir).get(endpoint_key(s.base_url, s.model or "default"))
    if speed is None:
        _note(
            out,
            "summarizer speed: not measured yet; until the first summary call measures it, calls are "
            "sized by their input and the window only",
        )
        return 0
    overhead = estimate_prompt_tokens(
        *prompts.summary_messages(
            "",
            previous_summary=None,
            identifier_policy=c.identifier_policy,
            identifier_instructions=c.identifier_instructions,
            custom_instructions=None,
            retry_reasons=None,
        )
    )
    fit = call_fit(
        Pace(s.timeout_seconds, speed),
        window=window,
        prompt_overhead=overhead,
        output_cap=s.max_output_tokens,
    )
    measured = (
        f"summarizer speed: measured {speed.describe()} ({speed.samples} call(s), last {speed.updated})"
    )
    if not fit.minimal_fits:
        needed = math.ceil(fit.minimal_seconds / PACE_SHARE)
        _warn(
            out,
            f"{measured}: a {s.timeout_seconds:g} s call cannot fit even the instructions "
            f"(~{overhead:,} prompt tokens) and a {OUTPUT_FLOOR_TOKENS}-token summary",
            f"raise summarizer.timeout_seconds to at least {needed} s, or use a faster model or server",
        )
        return 1
    limit = (
        f"the {window:,}-token window is the limit"
        if fit.window_bound
        else f"the timeout, not the {window:,}-token window, is the limit: chunks are sized to it"
    )
    _ok(
        out,
        f"{measured}: a {s.timeout_seconds:g} s call fits ~{fit.prompt:,} prompt tokens + "
        f"{fit.output:,} output ({limit})",
    )
    return 0


def run_doctor(config_path: str | None, out: TextIO, *, as_json: bool = False) -> int:
    """The checks, as lines on ``out`` (or, ``as_json``, as one JSON object); exit 1 if anything needs fixing."""
    if not as_json:
        return _doctor(config_path, out)
    import io

    import orjson

    lines = io.StringIO()
    code = _doctor(config_path, lines)
    findings = findings_of(lines.getvalue())
    report = {
        "ok": code == 0,
        "exit_code": code,
        "problems": sum(1 for f in findings if f["level"] == "fix"),
        "findings": findings,
    }
    out.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    return code


_LEVELS = {"ok    ": "ok", "note  ": "note", "FIX   ": "fix", "WARN  ": "warn"}


def findings_of(text: str) -> list[dict[str, str | None]]:
    """The findings of doctor's lines: a level, the text, and the fix when one follows it."""
    findings: list[dict[str, str | None]] = []
    for line in text.splitlines():
        if line.startswith("      → ") and findings:
            findings[-1]["fix"] = line.removeprefix("      → ")
        elif line[:6] in _LEVELS:
            findings.append({"level": _LEVELS[line[:6]], "text": line[6:], "fix": None})
    return findings


def _doctor(config_path: str | None, out: TextIO) -> int:
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        _bad(out, f"config: {exc}", "fix the key named above")
        return 1
    from compactd.logs import protect_config_secrets

    protect_config_secrets(config)  # before any line names the endpoint
    from compactd.sources.codex._doctor import check_codex
    from compactd.sources.openclaw import check_openclaw

    _ok(out, f"config {config.source} is valid")
    problems = (
        check_roots(config, out)
        + check_pi(config, out, os.environ)
        + check_sessions(config, out)
        + check_state_dir(config, out)
        + check_archives(config, out)
        + check_summarizer(config, out)
        + check_openclaw(
            config,
            os.environ,
            lambda t: _ok(out, t),
            lambda t, f: _bad(out, t, f),
            lambda t, f: _warn(out, t, f),
        )
        + check_codex(
            config,
            os.environ,
            lambda t: _ok(out, t),
            lambda t, f: _bad(out, t, f),
            lambda t, f: _warn(out, t, f),
        )
    )
    check_workspaces(config, discover_roots(config.sessions.roots, state_dir=config.state_dir)[0], out)
    out.write("all good\n" if not problems else f"{problems} thing(s) to fix\n")
    return 0 if not problems else 1
