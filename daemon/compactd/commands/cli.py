"""The ``compactd`` command: argument parsing and the subcommands; the work happens in the modules they call."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, cast

import orjson

from compactd import __version__
from compactd.heap import collector_paused

if TYPE_CHECKING:
    from compactd.config import Config
    from compactd.core.context import SessionContext
    from compactd.core.reader import Transcript
    from compactd.sources.files.job import Plan

__all__ = ["main"]


def _print_json(data: Any, out: TextIO) -> None:
    try:
        text = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # lone surrogates from a transcript: JSON can still carry them, escaped
        import json

        text = json.dumps(data, indent=2, ensure_ascii=True, default=str)
    out.write(text + "\n")


def _print_table(rows: Sequence[tuple[str, Any]], out: TextIO) -> None:
    """One row a line, whatever a value (a path, an id from the transcript) holds."""
    from compactd.display import display_name

    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out.write(f"{key.ljust(width)}  {display_name(str(value))}\n")


def _print_line(text: str, out: TextIO) -> None:
    """``text`` as one line: a file name or a problem message quoting a transcript cannot forge another."""
    from compactd.display import display_name

    out.write(display_name(text) + "\n")


def default_config_path(env: dict[str, str] | None = None) -> str | None:
    """``$COMPACTD_CONFIG``, else the user's, else the system's config file when it exists; None: defaults."""
    import os

    environ = os.environ if env is None else env
    if environ.get("COMPACTD_CONFIG"):
        return environ["COMPACTD_CONFIG"]
    home = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    for candidate in (os.path.join(home, "compactd", "config.yaml"), "/etc/compactd/config.yaml"):
        if os.path.isfile(candidate):
            return candidate
    return None


def _load_config(args: argparse.Namespace) -> Any:
    from compactd.config import load_config
    from compactd.logs import protect_config_secrets

    path = getattr(args, "config", None) or default_config_path()
    args.config = path
    config = load_config(path)
    protect_config_secrets(config)
    return config


@contextmanager
def _reporting(args: argparse.Namespace) -> Iterator[None]:
    """Logs at ``--log-level`` (default: warnings) and, unless ``-q``, the progress of long work on stderr:
    each stage and model call as it happens, one live line on a terminal, plain lines otherwise."""
    from compactd.logs import configure_logging
    from compactd.progress import ProgressHandler

    if args.log_level:
        configure_logging(args.log_level)
    reporter = logging.getLogger("compactd.progress")
    handler = None
    if args.quiet:
        reporter.setLevel(logging.CRITICAL)
    else:
        handler = ProgressHandler(sys.stderr)
        reporter.addHandler(handler)
        reporter.setLevel(logging.INFO)
        reporter.propagate = False  # reported once, by the handler made for it
    try:
        yield
    finally:
        if handler is not None:
            reporter.removeHandler(handler)
            handler.close()
        reporter.setLevel(logging.NOTSET)
        reporter.propagate = True


# What a command read, held past its return when the process ends with it (:func:`run_as_process` makes it a
# list): the process then hands all of its memory back at once instead of freeing a transcript object by object.
_left_to_exit: list[Any] | None = None


def _leave_to_exit(*objects: Any) -> None:
    if _left_to_exit is not None:
        _left_to_exit.extend(objects)


def cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    with collector_paused():
        return _inspect(args, out)


def _missing(command: str, path: str) -> bool:
    """Say so on stderr when ``path`` names nothing (a symlink counts: the reader refuses it with its reason)."""
    if os.path.lexists(path):
        return False
    from compactd.display import display_name

    sys.stderr.write(f"compactd {command}: {display_name(path)}: no such file\n")
    return True


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    from compactd.commands.inspection import inspect_transcript
    from compactd.core.context import build_context
    from compactd.core.planning import context_cap, figures_of
    from compactd.core.prune import ReducibleCount
    from compactd.reading import read_transcript

    config = _load_config(args)
    if _missing("inspect", args.file):
        return 2
    # Lean: a report needs the branch, the links and the problems, not every line off the branch as a dict.
    transcript = read_transcript(args.file, lean=True)
    context = build_context(transcript)  # once, for the report and the figures
    _leave_to_exit(transcript, context)
    # The routing figure's tool results are counted in the report's pass over the context (each read once).
    cap = context_cap(config, context)
    count = ReducibleCount(cap) if cap >= 1 else None  # else figures_of says why, as before
    _leave_to_exit(count)  # its lists of every tool result's texts: about 3 ms to free one by one
    report = inspect_transcript(args.file, transcript, context=context, reducible=count)
    if transcript.usable:
        from compactd.core.decision import decide
        from compactd.sources.files.job import Plan

        counted = (cap, count.total()) if count is not None else None
        figures = figures_of(config, transcript, context=context, counted=counted)
        plan = Plan(figures, decide(config, figures, now=0.0, force=True))
        report.update(plan.decision.as_json())
        report.update(_predicted(config, os.path.realpath(args.file), transcript, plan, context))
    if args.json:
        _print_json(report, out)
        return 0
    rows: list[tuple[str, Any]] = [
        (k, report.get(k))
        for k in (
            "path",
            "session_id",
            "version",
            "entries",
            "leaf_id",
            "rules",
            "context_messages",
            "context_tokens",
            "tokens_source",
            "estimated_with_margin",
            "context_window",
            "window_source",
            "compact_threshold",
            "route",
            "flush",
            "guard",
            "tool_result_chars",
        )
        if k in report
    ]
    rows.append(("by_role", ", ".join(f"{r}={t}" for r, t in report["by_role"].items()) or "-"))
    _print_table(rows, out)
    for problem in report["problems"]:
        _print_line(f"problem: {problem['kind']} (line {problem['line']}): {problem['message']}", out)
    return 0


def _predicted(
    config: Config, path: str, transcript: Transcript, plan: Plan, context: SessionContext
) -> dict[str, Any]:
    """The route and flush the run would take (``job.predict_route``, ``job.flush_runs``): what ``once
    --dry-run`` reports too, no model called. The prediction never waits (as in ``once --dry-run``): it is driven
    without an event loop, so asyncio and anyio's backend are neither imported nor started (about 45 ms).
    ``context``: the report's, built from ``transcript``: its rules spare each cut a walk of the branch."""
    from compactd import offload
    from compactd.sources.files.job import flush_runs, predict_route

    decision = plan.decision
    flush = bool(decision.flush) and flush_runs(config, path, transcript, rules=context.rules)
    out: dict[str, Any] = {"flush": flush}
    if decision.compact:
        out["route"] = offload.run_inline(
            functools.partial(
                predict_route, path, config, transcript, decision.job_route, plan=plan, context=context
            )
        )
    return out


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    from compactd.commands.inspection import validation_exit_code
    from compactd.reading import read_transcript

    with collector_paused():
        transcript = read_transcript(args.file, lean=True)  # the problems are the same, in the same order
    code = validation_exit_code(transcript)
    if args.json:
        _print_json(
            {
                "path": args.file,
                "ok": code == 0,
                "exit_code": code,
                "problems": [p.as_json() for p in transcript.problems],
            },
            out,
        )
    else:
        verdict = {0: "ok: loads with nothing skipped", 1: "loads, with problems", 2: "unusable"}[code]
        _print_line(f"{args.file}: {verdict}", out)
        for p in transcript.problems:
            _print_line(f"  {p.kind} (line {p.line}): {p.message}", out)
    return code


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    with _reporting(args):
        return _compact(args, out)


def _compact(args: argparse.Namespace, out: TextIO) -> int:
    import anyio

    from compactd.heap import fix_mmap_threshold
    from compactd.sources.files.job import EXIT_CODES, compact_file
    from compactd.summarize.settings import make_client

    fix_mmap_threshold()  # as the service: a compaction's peak not raised by the reads before it
    config = _load_config(args)

    async def go() -> Any:
        client = make_client(config)
        try:
            # The file named, resolved once: from here on only that file is read and committed.
            return await compact_file(
                os.path.realpath(args.file),
                config,
                client=client,
                dry_run=args.dry_run,
                mode=args.mode,
                force=args.force,
            )
        finally:
            if client is not None:
                await client.close()

    if args.dry_run:
        result = anyio.run(go)
    else:
        from compactd.commit.claim import ClaimBusy, SessionClaim
        from compactd.commit.journal import recover
        from compactd.sources.files.job import JobResult, JobStatus

        # Like run and once: finish what a killed commit left (its late lines belong in the file this
        # compaction is planned on), and never work on a session another compactd is flushing or compacting.
        recover(config.state_dir)
        try:
            with SessionClaim(config.state_dir, args.file):
                result = anyio.run(go)
        except ClaimBusy as exc:
            reason = f"busy: {exc}"
            result = JobResult(
                args.file, "none", mode=args.mode, reason=reason, status=JobStatus.AGENT_AT_WORK
            )
    data = result.as_json()
    if args.json:
        _print_json(data, out)
    else:
        if result.engine is not None:
            out.write(result.engine.summary + "\n\n")
        keys = (
            "route",
            "summary_level",
            "tokens_before",
            "tokens_after",
            "identifiers_total",
            "identifiers_in_summary",
            "committed",
            "mode",
            "archive",
            "outcome",
            "reason",
        )
        rows = [(k, data.get(k)) for k in keys if k in data]
        if result.fill is not None:
            rows.append(("fill", result.fill.describe()))
        _print_table(rows, out)
    return EXIT_CODES[result.outcome]


def _archives_of(path: str, state_dir: str) -> list[tuple[str, bool]]:
    """Every ``<name>.bak.*`` beside ``path``, oldest first, with whether compactd's journal made it."""
    from compactd.commit.atomic import ARCHIVE_INFIX
    from compactd.commit.journal import Journal
    from compactd.commit.retention import archive_time

    directory, name = os.path.split(path)
    ours = set(Journal(state_dir).archives(path))
    try:
        names = [n for n in os.listdir(directory) if n.startswith(name + ARCHIVE_INFIX)]
    except OSError:
        names = []
    found = [os.path.join(directory, n) for n in names]
    found.sort(key=lambda a: (archive_time(a) or 0.0, a))
    return [(a, a in ours) for a in found]


def _list_archives(path: str, state_dir: str, as_json: bool, out: TextIO) -> int:
    from compactd.commit.retention import archive_time
    from compactd.core.context import build_context, context_estimate
    from compactd.core.timestamps import js_iso
    from compactd.reading import read_transcript

    rows: list[dict[str, Any]] = []
    with collector_paused():
        for archive, ours in _archives_of(path, state_dir):
            transcript = read_transcript(archive, follow_symlinks=False)
            when = archive_time(archive)
            try:
                size = os.lstat(archive).st_size
            except OSError:
                continue
            tokens = context_estimate(build_context(transcript)).tokens if transcript.usable else None
            rows.append(
                {
                    "archive": archive,
                    "time": js_iso(when) if when is not None else None,
                    "bytes": size,
                    "tokens": tokens,
                    "by": "compactd" if ours else "other",
                }
            )
    if as_json:
        _print_json({"path": path, "archives": rows}, out)
        return 0
    if not rows:
        _print_line(f"{path}: no archives", out)
        return 1
    for row in rows:
        figure = "unloadable" if row["tokens"] is None else f"{row['tokens']:,} tokens"
        _print_line(
            f"{row['time'] or '-':24}  {row['bytes']:>12,} bytes  {figure:>16}  {row['by']:8}  "
            f"{os.path.basename(row['archive'])}",
            out,
        )
    return 0


def cmd_restore(args: argparse.Namespace, out: TextIO) -> int:
    from compactd.commit.claim import ClaimBusy, SessionClaim
    from compactd.commit.commit import CommitResult, commit
    from compactd.commit.journal import recover
    from compactd.sources.files.job import turn_in_flight

    config = _load_config(args)
    path = os.path.realpath(args.file)
    if args.list:
        return _list_archives(path, config.state_dir, args.json, out)
    if args.archive:
        archive = os.path.join(
            os.path.realpath(os.path.dirname(args.archive) or "."), os.path.basename(args.archive)
        )
    else:
        ours = [a for a, by_us in _archives_of(path, config.state_dir) if by_us]
        if not ours:
            _print_line(f"{path}: no archive made by compactd; name one with --archive", out)
            return 1
        archive = ours[-1]

    def busy(current: Any) -> str | None:
        return turn_in_flight(config, path, current)

    from compactd.sources.openclaw import refusal

    sqlite_refusal = refusal(path)
    if sqlite_refusal is not None:  # as compact: nothing is written under a SQLite-backed OpenClaw agent
        _print_line(f"{path}: refusing: {sqlite_refusal}", out)
        return 1

    # As compact: finish what a killed commit left, and never race another compactd on this session.
    recover(config.state_dir)
    try:
        with SessionClaim(config.state_dir, path):
            result = commit(
                path,
                None,
                mode="rotate",
                state_dir=config.state_dir,
                idle_seconds=config.sessions.idle_seconds,
                force=args.force,
                grace_seconds=config.compaction.rotate_grace_seconds,
                archive_keep_count=config.compaction.archives.keep_count,
                archive_keep_days=config.compaction.archives.keep_days,
                check=None if args.force else busy,
                restore_from=archive,
            )
    except ClaimBusy as exc:
        result = CommitResult(False, "rotate", None, f"busy: {exc}", None, 0, 0)
    data = {"path": path, "restored_from": archive, **result.as_json()}
    if args.json:
        _print_json(data, out)
    else:
        keys = ("path", "restored_from", "committed", "archive", "carried_lines", "rescued_lines", "reason")
        _print_table([(k, data.get(k)) for k in keys], out)
    return 0 if result.committed else 1


def cmd_once(args: argparse.Namespace, out: TextIO) -> int:
    with _reporting(args):
        return _once(args, out)


def _once(args: argparse.Namespace, out: TextIO) -> int:
    from compactd.service import run_once

    config = _load_config(args)
    if not args.dry_run:
        return run_once(config, as_json=args.json, force=args.force, sessions=args.sessions, out=out)
    # A dry run only reads and decides: like inspect, it keeps nothing cyclic worth collecting, writes nothing,
    # and leaves its process to end at once (the interpreter's teardown: about 25 ms of a 0.7 s corpus pass).
    with collector_paused():
        code = run_once(
            config, dry_run=True, as_json=args.json, force=args.force, sessions=args.sessions, out=out
        )
    _leave_to_exit(config)
    return code


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    from compactd.logs import configure_logging
    from compactd.service import run_service

    config = _load_config(args)
    configure_logging(args.log_level or config.log_level, style=args.log_format, pinned=bool(args.log_level))
    return run_service(config, config_path=args.config)


def _watch_status(state_dir: Any, out: TextIO, *, interval: float, count: int | None) -> int:
    """``status --watch``: on a TTY the view is redrawn in place; otherwise each refresh that changed something
    is printed as plain lines under a time stamp (a log a pipe or a file can keep)."""
    import time

    from compactd.core.timestamps import iso_seconds
    from compactd.state import read_status, render_watch

    raw = getattr(out, "stream", out)
    tty = hasattr(raw, "isatty") and raw.isatty()
    shown: list[str] | None = None
    done = 0
    while count is None or done < count:
        status = read_status(state_dir)
        lines = render_watch(status) if status is not None else [f"no status in {state_dir} yet"]
        if tty:
            raw.write("\x1b[H\x1b[2J")  # home, clear: written raw (``out`` escapes control characters)
            for line in lines:
                out.write(line + "\n")
            out.flush()
        elif shown is None or lines[1:] != shown[1:]:
            out.write(f"--- {iso_seconds(time.time())}\n")
            for line in lines:
                out.write(line + "\n")
            out.flush()
        shown = lines
        done += 1
        if count is None or done < count:
            time.sleep(interval)  # the refresh period of a view, not a wait for an event
    return 0


def cmd_status(args: argparse.Namespace, out: TextIO) -> int:
    from compactd.state import archive_usage, daemon_running, read_status, render_status_table

    config = _load_config(args)
    if args.watch:
        return _watch_status(config.state_dir, out, interval=args.interval, count=args.count)
    status = read_status(config.state_dir)
    if status is None:
        _print_line(f"no status in {config.state_dir}: compactd has not run with this state directory", out)
        return 1
    status["archives"] = archive_usage(config.state_dir).as_json()  # read now: the journal is the truth
    running = status["daemon_running"] = daemon_running(status)
    if args.json:
        _print_json(status, out)
    else:
        out.write(render_status_table(status) + "\n")
    return 0 if running else 3  # 3: what is shown is the last run's; no daemon serves these sessions now


def cmd_doctor(args: argparse.Namespace, out: TextIO) -> int:
    from compactd.commands.doctor import run_doctor

    return run_doctor(args.config, out, as_json=args.json)


def cmd_summarize(args: argparse.Namespace, out: TextIO) -> int:
    with _reporting(args):
        return _summarize(args, out)


def _summarize(args: argparse.Namespace, out: TextIO) -> int:
    from compactd.commands.provider import ModelFailed, RequestError, parse_request, read_input, run_summarize

    config = _load_config(args)
    try:
        # Bounded (a larger input is refused before it is read whole), and its bytes freed once parsed.
        request = parse_request(read_input(sys.stdin.fileno()))
        answer = run_summarize(config, request, workspace=args.workspace, agent=args.agent)
    except RequestError as exc:
        sys.stderr.write(f"compactd summarize: {exc}\n")
        return 2
    except ModelFailed as exc:
        from compactd.logs import ScrubbedOutput

        ScrubbedOutput(sys.stderr).write(f"compactd summarize: {exc}\n")  # the error may quote the endpoint
        return 1
    out.write(answer + "\n")
    return 0


def cmd_hook(args: argparse.Namespace, out: TextIO) -> int:
    """An agent's hook: ``codex-precompact`` flushes memories before Codex compacts (never blocks it: exit 0);
    ``codex-prompt`` installs compactd's compact prompt into ``$CODEX_HOME`` and prints its path."""
    import anyio

    from compactd.sources.codex import codex_home, install_compact_prompt, precompact
    from compactd.sources.codex._hook import HookRefused

    config = _load_config(args)
    if args.hook == "codex-prompt":
        _print_line(str(install_compact_prompt(codex_home(os.environ, config.codex.home))), out)
        return 0
    try:
        done = anyio.run(precompact, config, os.environ, sys.stdin.buffer.read(1 << 20 | 1))
    except HookRefused as exc:
        sys.stderr.write(f"compactd hook codex-precompact: {exc}\n")
        return 0
    sys.stderr.write(f"compactd hook codex-precompact: {done.get('action')} {done.get('reason') or ''}\n")
    return 0


COMPACT_EXIT_CODES = """exit codes:
  0  committed (or, with --dry-run, the plan shown)
  1  failed (the reason is printed; --json: "outcome": "failed" and "reason")
  2  bad configuration or arguments
  3  busy: not idle, a turn in flight, or locked by an agent or another compactd; retry later
  4  nothing to do: the whole branch is within the kept recent turns
Every check that can refuse the commit runs before the first model call, and again under the commit lock."""

LOG_LEVELS = ("debug", "info", "warning", "error")


def help_width() -> int:
    """The width argparse gives the help by default (``shutil.get_terminal_size().columns - 2``), found once for
    every formatter: argparse makes one for each argument added, and imports shutil to size it, which loads zlib,
    bz2 and lzma (about 2 ms of every command's start)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (ValueError, OSError):  # closed, detached, or not a terminal
            columns = 0
    return (columns or 80) - 2


def build_parser() -> argparse.ArgumentParser:
    width = help_width()
    parser = argparse.ArgumentParser(
        prog="compactd",
        description=__doc__,
        formatter_class=functools.partial(argparse.HelpFormatter, width=width),
    )
    parser.add_argument("--version", action="version", version=f"compactd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(
        name: str,
        handler: Callable[[argparse.Namespace, TextIO], int],
        help_text: str,
        epilog: str | None = None,
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=epilog,
            formatter_class=functools.partial(argparse.RawDescriptionHelpFormatter, width=width),
        )
        p.set_defaults(handler=handler)
        return p

    def config(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config",
            metavar="PATH",
            help="config file (default: $COMPACTD_CONFIG, ~/.config/compactd/config.yaml, "
            "/etc/compactd/config.yaml, else the built-in defaults)",
        )

    def as_json(p: argparse.ArgumentParser, what: str = "print JSON instead of a table") -> None:
        p.add_argument("--json", action="store_true", help=what)

    def reporting(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "-q", "--quiet", action="store_true", help="no progress on stderr (errors are still printed)"
        )
        p.add_argument(
            "--log-level",
            choices=LOG_LEVELS,
            help="also log at this level on stderr (default: warnings only)",
        )

    p = add("inspect", cmd_inspect, "Show a transcript's token figures, budget and route.")
    p.add_argument("file", help="the session transcript (.jsonl)")
    as_json(p)
    config(p)
    p = add("validate", cmd_validate, "Check that an agent would load a transcript with nothing skipped.")
    p.add_argument("file", help="the session transcript (.jsonl)")
    as_json(p)
    p = add(
        "compact",
        cmd_compact,
        "Compact one transcript now (or show what would be committed).",
        COMPACT_EXIT_CODES,
    )
    p.add_argument("file", help="the session transcript (.jsonl)")
    p.add_argument("--dry-run", action="store_true", help="run the engine (and the model), change no file")
    p.add_argument(
        "--mode",
        choices=("append", "rotate"),
        help="append the compaction to the file, or rotate it (archive the original); default: the config's",
    )
    p.add_argument(
        "--force", action="store_true", help="skip the idle and turn-in-flight checks (never the lock)"
    )
    as_json(p, "print the result as JSON (outcome, reason, figures, summary)")
    config(p)
    reporting(p)
    p = add(
        "restore", cmd_restore, "Put a session back as an archive holds it, keeping every line written since."
    )
    p.add_argument("file", help="the session transcript (.jsonl)")
    p.add_argument("--archive", metavar="PATH", help="the archive to restore (default: compactd's newest)")
    p.add_argument("--list", action="store_true", help="list the session's archives: time, size, tokens")
    p.add_argument("--force", action="store_true", help="skip the idle and turn checks (never the lock)")
    as_json(p, "print the result (or the list) as JSON")
    config(p)
    p = add("once", cmd_once, "One pass over every session, doing what `run` would do now, then exit.")
    p.add_argument("--dry-run", action="store_true", help="decide and report; read only, change nothing")
    as_json(p)
    p.add_argument(
        "--force", action="store_true", help="skip the idle and turn-in-flight checks (never the lock)"
    )
    p.add_argument(
        "--sessions", action="append", metavar="DIR", help="watch this directory instead of the roots"
    )
    config(p)
    reporting(p)
    p = add("run", cmd_run, "Run the service: watch, account, flush, compact, commit.")
    config(p)
    p.add_argument(
        "--log-level", choices=LOG_LEVELS, help="overrides the config's log_level, also across reloads"
    )
    p.add_argument(
        "--log-format",
        choices=("text", "logfmt", "json"),
        default="text",
        help="one event a line: text (the default), logfmt (key=value) or json",
    )
    p = add("status", cmd_status, "Show the sessions and the daemon's health from the state directory.")
    as_json(p)
    p.add_argument(
        "--watch",
        action="store_true",
        help="a live view: each session's fill, its action in progress, the last",
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes of --watch")
    p.add_argument("--count", type=int, help="stop --watch after this many refreshes")
    config(p)
    p = add(
        "summarize",
        cmd_summarize,
        "Summarize messages given as JSON on stdin (OpenClaw's compaction provider).",
    )
    p.add_argument(
        "--json", action="store_true", help="the only format: {messages, previousSummary} in, {summary} out"
    )
    p.add_argument(
        "--workspace", metavar="DIR", help="the workspace whose AGENTS.md rules the summary carries"
    )
    p.add_argument("--agent", default="main", help="the OpenClaw agent id, for the config's workspaces")
    config(p)
    reporting(p)
    p = add("hook", cmd_hook, "Run as an agent's hook: codex-precompact (memory flush), codex-prompt.")
    p.add_argument("hook", choices=("codex-precompact", "codex-prompt"), help="which hook")
    config(p)
    p = add("doctor", cmd_doctor, "Check the config, roots, permissions and the summarizer endpoint.")
    as_json(p, "print the checks as JSON")
    config(p)
    return parser


def run_as_process() -> NoReturn:
    """The process's entry point (``compactd``, ``python -m compactd``): :func:`main`, then the exit.

    When the command left what it read to the process's end (``inspect``: a 200 MB transcript is 42,000 entries
    as dicts), the process ends as soon as its output is flushed and its logging shut down, as a normal exit
    would, instead of freeing all of it object by object and tearing the interpreter down (about 0.1 s of CPU).
    Such a command (``inspect``, ``once --dry-run``) registers no exit handler but logging's, and the process
    ends so only while no other thread runs; every other command exits as before."""
    global _left_to_exit
    _left_to_exit = []
    code = main()
    if _left_to_exit and threading.active_count() == 1:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:  # a closed pipe: the interpreter's own exit reports it, as before
            _left_to_exit = None
            raise SystemExit(code) from None
        logging.shutdown()
        os._exit(code)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")  # a transcript's lone surrogates must not crash us
    parser = build_parser()
    args = parser.parse_args(argv)
    from compactd.logs import ScrubbedOutput, configure_logging

    # Every command logs through the same scrubbing handler as ``run`` (which sets its own level) and prints
    # through the same scrub, so a key never reaches a terminal or a journal from any of them.
    configure_logging("warning")
    out = cast(TextIO, ScrubbedOutput(sys.stdout))
    try:
        code: int = args.handler(args, out)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the last line of defence: a clear message, never a traceback
        from compactd.config import ConfigError

        if isinstance(exc, ConfigError):
            ScrubbedOutput(sys.stderr).write(f"compactd: {exc}\n")
            return 2
        # Through the scrubbing handler: a raw traceback could quote the endpoint and its key.
        logging.getLogger("compactd.commands.cli").critical(
            "compactd %s failed: %r", args.command, exc, exc_info=True
        )
        return 1
    return code
