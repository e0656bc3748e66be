"""``compactd doctor``: what would stop compactd from working here, and what to do about each."""

from __future__ import annotations

import os
from typing import TextIO

import anyio

from daemon.config import Config, ConfigError, load_config
from daemon.watch import expand_roots, scan_root


def _ok(out: TextIO, text: str) -> None:
    out.write(f"ok    {text}\n")


def _bad(out: TextIO, text: str, fix: str) -> None:
    out.write(f"FIX   {text}\n      → {fix}\n")


def _warn(out: TextIO, text: str, fix: str) -> None:
    out.write(f"WARN  {text}\n      → {fix}\n")


def check_roots(config: Config, out: TextIO) -> int:
    problems = 0
    roots = expand_roots(config.sessions.roots)
    if not roots:
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
    from daemon.state import archive_usage, human_bytes

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
    from daemon.job import make_client

    async def probe() -> object:
        client = make_client(config)
        try:
            return await client.check()
        finally:
            await client.close()

    result = anyio.run(probe)
    problems = list(getattr(result, "problems", ()))
    for note in getattr(result, "notes", ()):
        out.write(f"note  {note}\n")
    if problems:
        for problem in problems:
            _bad(out, f"summarizer: {problem}", "see config.example.yaml, section summarizer")
        return len(problems)
    _ok(out, f"summarizer {s.base_url} serves {s.model}")
    return 0


def run_doctor(config_path: str | None, out: TextIO) -> int:
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        _bad(out, f"config: {exc}", "fix the key named above")
        return 1
    _ok(out, f"config {config.source} is valid")
    problems = (
        check_roots(config, out)
        + check_state_dir(config, out)
        + check_archives(config, out)
        + check_summarizer(config, out)
    )
    out.write("all good\n" if not problems else f"{problems} thing(s) to fix\n")
    return 0 if not problems else 1
