"""Log lines: journald priority prefixes, timestamps elsewhere, one line per event, secrets scrubbed."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest
from compactd.config import load_config
from compactd.logs import (
    LOG_LEVELS,
    LineFormatter,
    ScrubbedOutput,
    add_secret,
    add_url_secrets,
    clear_secrets,
    configure_logging,
    protect_config_secrets,
    scrub,
)

REPO = Path(__file__).resolve().parent.parent
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    chatty = {name: logging.getLogger(name).level for name in ("httpx", "httpcore")}
    try:
        yield
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
        root.setLevel(level)
        for name, lvl in chatty.items():
            logging.getLogger(name).setLevel(lvl)
        clear_secrets()


def _journal_file(tmp_path: Path) -> tuple[TextIO, dict[str, str]]:
    """A real file standing in for the journal's stream, and the JOURNAL_STREAM systemd would set for it."""
    stream = (tmp_path / "journal").open("w+", encoding="utf-8")
    st = os.fstat(stream.fileno())
    return stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}


def _lines(stream: TextIO) -> list[str]:
    stream.flush()
    stream.seek(0)
    return stream.read().splitlines()


def test_plain_format_has_utc_timestamp_level_logger_and_message() -> None:
    out = io.StringIO()
    configure_logging("info", env={}, stream=out)
    logging.getLogger("compactd.sources.watch").info("session=%s action=%s", "abc", "compact")
    (line,) = out.getvalue().splitlines()
    assert re.fullmatch(STAMP + r" INFO compactd\.sources\.watch: session=abc action=compact", line), line


def test_timestamp_is_utc_with_milliseconds() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    record.created = 1_796_040_000.123  # 2026-11-30T12:00:00.123Z
    record.msecs = 123.0
    assert LineFormatter(journal=False).format(record) == "2026-11-30T12:00:00.123Z INFO x: m"


@pytest.mark.parametrize(
    ("level", "prefix"),
    [
        (logging.DEBUG, "<7>"),
        (logging.INFO, "<6>"),
        (logging.WARNING, "<4>"),
        (logging.ERROR, "<3>"),
        (logging.CRITICAL, "<2>"),
    ],
)
def test_journal_lines_carry_priority_and_no_timestamp(tmp_path: Path, level: int, prefix: str) -> None:
    stream, env = _journal_file(tmp_path)
    with stream:
        configure_logging("debug", env=env, stream=stream)
        logging.getLogger("compactd.commit").log(level, "committed session=s1")
        (line,) = _lines(stream)
    name = logging.getLevelName(level)
    assert line == f"{prefix}{name} compactd.commit: committed session=s1"
    assert not re.search(r"\d{4}-\d\d-\d\dT", line)


def test_journal_stream_naming_another_file_means_plain_lines(tmp_path: Path) -> None:
    """A child of a unit inherits JOURNAL_STREAM with stderr redirected: it is not talking to journald."""
    other = tmp_path / "other"
    other.write_text("")
    st = os.stat(other)
    with (tmp_path / "log").open("w+", encoding="utf-8") as stream:
        configure_logging("info", env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, stream=stream)
        logging.getLogger("t").info("hello")
        (line,) = _lines(stream)
    assert re.fullmatch(STAMP + " INFO t: hello", line), line


@pytest.mark.parametrize("value", ["garbage", "1:", ":2", ""])
def test_malformed_journal_stream_means_plain_lines(value: str) -> None:
    out = io.StringIO()
    configure_logging("info", env={"JOURNAL_STREAM": value}, stream=out)
    logging.getLogger("t").info("hello")
    assert re.fullmatch(STAMP + " INFO t: hello\n", out.getvalue())


def test_journal_stream_is_trusted_for_a_stream_without_descriptor() -> None:
    out = io.StringIO()
    configure_logging("info", env={"JOURNAL_STREAM": "8:12345"}, stream=out)
    logging.getLogger("t").warning("hm")
    assert out.getvalue() == "<4>WARNING t: hm\n"


def test_real_stderr_under_journal_stream_in_a_subprocess(tmp_path: Path) -> None:
    """The default stream is stderr; JOURNAL_STREAM matching the real fd 2 switches the format."""
    log_path = tmp_path / "stderr.log"
    code = (
        "import logging, os\n"
        "from compactd.logs import configure_logging\n"
        "st = os.fstat(2)\n"
        "configure_logging('info', env={'JOURNAL_STREAM': f'{st.st_dev}:{st.st_ino}'})\n"
        "logging.getLogger('child').error('boom')\n"
        "configure_logging('info', env={})\n"
        "logging.getLogger('child').error('plain')\n"
    )
    with log_path.open("wb") as err:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            stderr=err,
            env={**os.environ, "PYTHONPATH": str(REPO / "daemon")},
            timeout=60,
            check=False,
        )
    assert proc.returncode == 0
    first, second = log_path.read_text().splitlines()
    assert first == "<3>ERROR child: boom"
    assert re.fullmatch(STAMP + " ERROR child: plain", second)


def _raise_with_newlines() -> None:
    raise RuntimeError("line one\nline two")


@pytest.mark.parametrize("journal", [False, True])
def test_traceback_and_multiline_message_stay_one_line(journal: bool) -> None:
    out = io.StringIO()
    configure_logging("info", env={"JOURNAL_STREAM": "1:1"} if journal else {}, stream=out)
    try:
        _raise_with_newlines()
    except RuntimeError:
        logging.getLogger("compactd.run").exception("commit failed\nsession=s2")
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert "commit failed\\nsession=s2\\nTraceback (most recent call last):\\n" in text
    assert "_raise_with_newlines" in text
    assert "RuntimeError: line one\\nline two" in text
    assert text.startswith("<3>ERROR compactd.run: " if journal else "")


def test_stack_info_stays_one_line() -> None:
    out = io.StringIO()
    configure_logging("info", env={}, stream=out)
    logging.getLogger("t").info("where", stack_info=True)
    text = out.getvalue()
    assert text.count("\n") == 1
    assert "Stack (most recent call last):" in text


def test_carriage_return_is_escaped() -> None:
    out = io.StringIO()
    configure_logging("info", env={}, stream=out)
    logging.getLogger("t").info("a\rb")
    assert out.getvalue().endswith("INFO t: a\\rb\n")


def test_secrets_are_scrubbed_from_messages_args_and_tracebacks() -> None:
    secret = "sk-live-0123456789abcdef"
    add_secret(secret)
    out = io.StringIO()
    configure_logging("debug", env={}, stream=out)
    log = logging.getLogger("compactd.summarize")
    log.info("calling with key %s", secret)
    log.debug(f"inline {secret} too")
    try:
        raise ValueError(f"bad key {secret}")
    except ValueError:
        log.exception("request failed")
    text = out.getvalue()
    assert secret not in text
    assert text.count("***") == 3
    assert "calling with key ***" in text
    assert "ValueError: bad key ***" in text


def test_longer_secret_containing_a_shorter_one_is_masked_whole() -> None:
    add_secret("abcd")
    add_secret("abcd-efgh-ijkl")
    assert scrub("x abcd-efgh-ijkl y abcd") == "x *** y ***"


def test_too_short_values_are_not_registered() -> None:
    add_secret("")
    add_secret("ab")
    assert scrub("ab cd") == "ab cd"


def test_any_url_credentials_are_masked_without_registration() -> None:
    """A status file or an error may name an endpoint this process never configured."""
    line = "HTTP 404 from https://bot:pw-77aa@h.example/v1?api-key=Zq81xYt3Kp0&page=2 model 'm'"
    assert scrub(line) == (
        "HTTP 404 from https://bot:[REDACTED:url_password]@h.example/v1?api-key=[REDACTED:url_secret]&page=2 "
        "model 'm'"
    )


def test_a_configured_url_registers_every_query_value_as_written_and_decoded() -> None:
    add_url_secrets("https://h.example/v1?code=Zq81%2Bxy9&deployment=prod-east-2&v=1")
    assert scrub("code Zq81%2Bxy9 / Zq81+xy9, on prod-east-2, v=1") == "code *** / ***, on ***, v=1"


def test_the_config_registers_its_key_and_base_url_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "summarizer:\n  base_url: http://127.0.0.1:9/v1?api-key=Zq81xYt3Kp0\n  model: m\n"
        "  api_key_env: TEST_COMPACTD_KEY\n"
    )
    monkeypatch.setenv("TEST_COMPACTD_KEY", "local-Kq7Wm3Zx9Pt2Ld")
    protect_config_secrets(load_config(str(config)))
    assert scrub("key local-Kq7Wm3Zx9Pt2Ld, query Zq81xYt3Kp0") == "key ***, query ***"


def test_an_unreadable_key_file_registers_the_rest_and_raises_nothing(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "summarizer:\n  base_url: http://127.0.0.1:9/v1?api-key=Zq81xYt3Kp0\n  model: m\n"
        f"  api_key_file: {tmp_path / 'missing'}\n"
    )
    protect_config_secrets(load_config(str(config)))
    assert scrub("Zq81xYt3Kp0") == "***"


def test_scrubbed_output_scrubs_what_a_command_prints() -> None:
    add_secret("local-Kq7Wm3Zx9Pt2Ld")
    out = io.StringIO()
    printer = ScrubbedOutput(out)
    printer.write("ok    summarizer http://h/v1?sig=local-Kq7Wm3Zx9Pt2Ld serves m\n")
    printer.flush()
    assert out.getvalue() == "ok    summarizer http://h/v1?sig=*** serves m\n"


def test_the_default_handler_writes_to_the_current_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """``main()`` run in-process (by a test) must never keep a stream that is swapped and closed later."""
    configure_logging("info", env={})
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logging.getLogger("t").warning("one")
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("t").warning("two")
    assert "one" in first.getvalue() and "two" not in first.getvalue()
    assert "two" in second.getvalue()


def test_clear_secrets() -> None:
    add_secret("token-value")
    assert scrub("token-value") == "***"
    clear_secrets()
    assert scrub("token-value") == "token-value"


def test_level_filters_and_is_case_insensitive() -> None:
    out = io.StringIO()
    configure_logging("WARNING", env={}, stream=out)
    log = logging.getLogger("t")
    log.info("hidden")
    log.warning("shown")
    assert "hidden" not in out.getvalue()
    assert "shown" in out.getvalue()


def test_invalid_level_names_the_valid_ones() -> None:
    with pytest.raises(ValueError) as excinfo:
        configure_logging("verbose", env={}, stream=io.StringIO())
    message = str(excinfo.value)
    assert "'verbose'" in message
    for name in LOG_LEVELS:
        assert name in message


def test_reconfiguring_replaces_our_handler_and_keeps_others() -> None:
    root = logging.getLogger()
    foreign = logging.NullHandler()
    root.addHandler(foreign)
    first, second = io.StringIO(), io.StringIO()
    configure_logging("info", env={}, stream=first)
    configure_logging("info", env={}, stream=second)
    logging.getLogger("t").info("once")
    assert first.getvalue() == ""
    assert second.getvalue().count("once") == 1
    assert foreign in root.handlers
    root.removeHandler(foreign)


def test_http_client_request_logs_are_quiet_unless_debugging() -> None:
    out = io.StringIO()
    configure_logging("info", env={}, stream=out)
    logging.getLogger("httpx").info('HTTP Request: POST http://127.0.0.1/v1/chat/completions "200 OK"')
    assert out.getvalue() == ""
    configure_logging("debug", env={}, stream=out)
    logging.getLogger("httpx").info("HTTP Request: visible")
    assert "visible" in out.getvalue()
