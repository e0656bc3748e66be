"""Issue 22: each message's redaction and identifier findings made when the daemon reads it, stored per session,
and merged at compaction into exactly the records, copies and summary a cold compaction makes."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from compactd.core.messages import llm_visible
from compactd.core.repair import repair_tool_pairing
from compactd.reading import read_transcript
from compactd.sources.files.preparer import (
    STORE_FORMAT,
    Preparer,
    _header,
    _shown,
    store_lines,
    store_path,
)
from compactd.summarize.engine import CompactionEngine, EngineSettings
from compactd.summarize.identifiers import (
    FindingsMerge,
    extract_identifiers,
    findings_valid,
    merge_findings,
)
from compactd.summarize.prepared import Prepared, decode, encode, message_key, prepare, stored_shares
from compactd.summarize.redact import SpanText, redact_value
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.corpus import session_bytes
from tests.test_identifiers import MESSAGE_SPECS, _real_dir, messages_of, result, user
from tests.test_service_e2e import daemon_factory  # noqa: F401 (the fixture)

REPO = Path(__file__).resolve().parents[1]
Msg = dict[str, Any]
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _lines(messages: list[Msg]) -> list[bytes]:
    """Each message prepared and written as a store line, as the preparer writes them."""
    memo: dict[str, Any] = {}
    out = []
    for m in messages:
        key = message_key(m)
        assert key is not None
        out.append(encode(key, prepare(m, memo)))
    return out


def _stored(messages: list[Msg]) -> dict[str, Prepared]:
    """Each message's store line read back, by key."""
    out = {}
    for line in _lines(messages):
        got = decode(line)
        assert got is not None
        out[got[0]] = got[1]
    return out


def load_prepared(state: Path, session: str) -> dict[str, Prepared]:
    """A session's store as the shares it holds, by key (what a compaction can find in it)."""
    return {got[0]: got[1] for line in store_lines(state, session) if (got := decode(line)) is not None}


def _cold_and_prepared(read: list[Msg]) -> tuple[Any, Any, list[Msg], list[Msg]]:
    """Records and handed-on copies, cold (as the engine makes them) and from prepared shares."""
    handed_on = [redact_value(m) for m in read]
    cold = extract_identifiers(handed_on, SpanText.of(read, handed_on))
    store = _stored(read)
    shares = [store.get(message_key(m) or "") for m in read]
    assert all(s is not None for s in shares)
    copies = [m if s.redacted is None else s.redacted for m, s in zip(read, shares, strict=True) if s]
    merged = merge_findings([s.findings for s in shares if s is not None])
    return cold, merged, handed_on, copies


@given(MESSAGE_SPECS)
@settings(max_examples=200, deadline=None)
def test_merged_findings_and_stored_copies_equal_the_cold_ones(specs: list[tuple[str, str, str]]) -> None:
    """Every field of every record, and every redacted copy, from stored shares is what the engine makes cold,
    on messages of every role whose texts hold identifiers, phrases and secrets, repeated across messages."""
    read = messages_of(specs)
    cold, merged, handed_on, copies = _cold_and_prepared(read)
    assert merged == cold
    assert copies == handed_on


@given(MESSAGE_SPECS, st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None)
def test_findings_merged_in_any_order_make_the_records_of_merging_them_in_order(
    specs: list[tuple[str, str, str]], rng: random.Random
) -> None:
    """A compaction merges stored findings in the store's order and the missing messages' after: each message's
    findings added at its position in any order (repeats included) give every field of every record of the
    in-order merge, which is the cold extraction's."""
    read = messages_of(specs)
    read = read + [read[rng.randrange(len(read))] for _ in range(rng.randrange(3))]  # a message twice
    handed_on = [redact_value(m) for m in read]
    memo: dict[str, Any] = {}
    findings = [prepare(m, memo).findings for m in read]
    in_order = merge_findings(findings)
    assert in_order == extract_identifiers(handed_on, SpanText.of(read, handed_on))
    order = list(range(len(read)))
    rng.shuffle(order)
    merged = FindingsMerge()
    for index in order:
        merged.add(findings[index], index)
    assert merged.records() == in_order


def test_two_records_of_one_text_from_one_message_keep_their_order_whatever_the_merge_order() -> None:
    """A text an agent ran as a command and a user then wrote (a hash): two records, both first seen in the
    agent's message, the command's first, whichever message's findings are merged first (hypothesis found the
    merge breaking that tie by which key it made first)."""
    read = messages_of(
        [("assistant", "", "abcdef1234567890ABCDEF12"), ("user", "", "abcdef1234567890ABCDEF12")]
    )
    memo: dict[str, Any] = {}
    findings = [prepare(m, memo).findings for m in read]
    backwards = FindingsMerge()
    for index in (1, 0):
        backwards.add(findings[index], index)
    in_order = merge_findings(findings)
    assert [r.kind for r in in_order] == ["command", "hash"]
    assert backwards.records() == in_order


@given(MESSAGE_SPECS, st.randoms(use_true_random=False))
@settings(max_examples=100, deadline=None)
def test_shares_matched_from_a_store_in_any_order_are_the_cold_ones(
    specs: list[tuple[str, str, str]], rng: random.Random
) -> None:
    """The store's lines shuffled, a line twice, a damaged copy of a span message's line before its good one, a
    message the span does not hold, and one the store lacks: each span position gets its own message's share (a
    message at two positions at both), and the records, with the missing one made cold, are the cold ones."""
    read = messages_of(specs)
    span = [*read, read[0]]
    keys = [message_key(m) for m in span]
    lacked = keys[rng.randrange(len(read))]  # the store lacks this message (and any equal to it)
    lines = _lines(read)
    stored = [line for line, key in zip(lines, keys, strict=False) if key != lacked]
    stored += stored[:1]
    stored += _lines([user("not in the span: /srv/other.py")])
    torn = lines[rng.randrange(len(lines))]
    torn = torn[: len(torn) // 2]
    rng.shuffle(stored)
    stored.insert(0, torn)
    shares, merged = stored_shares(stored, keys)
    expected = _stored(read)
    for key, share in zip(keys, shares, strict=True):
        if key == lacked:
            assert share is None
        else:
            assert share is not None and key is not None
            assert (share.redacted, share.derived) == (expected[key].redacted, expected[key].derived)
    assert merged.added == {i for i, key in enumerate(keys) if key != lacked}
    handed_on = [redact_value(m) for m in span]
    texts = SpanText.of(span, handed_on)
    assert extract_identifiers(handed_on, texts, merged) == extract_identifiers(handed_on, texts)


@pytest.mark.parametrize(
    ("findings", "valid"),
    [
        (["/a", 16, 1, "b.py", 17, 3], True),
        ([], True),
        (["/a", 16], False),  # not three to a finding
        ([7, 16, 1], False),  # an identifier that is not text
        ([None, 16, 1], False),
        (["/a", "16", 1], False),  # a code that is not a number
        (["/a", 16.0, 1], False),  # nor a float
        (["/a", 16, 1.5], False),  # a count that is a float
        (["/a", 16, [1]], False),
        (["/a", 16, None], False),
        (["/a", -1, 1], False),  # a code outside the kinds
        (["/a", 9999, 1], False),
        ({"/a": 16}, False),
    ],
)
def test_stored_findings_of_any_other_shape_are_refused(findings: Any, valid: bool) -> None:
    assert findings_valid(findings) is valid


def _sessions() -> list[Path]:
    real = sorted(_real_dir().glob("*.jsonl")) if _real_dir().is_dir() else []
    return real


def _bench_session(tmp_path: Path, size: int = 400_000) -> Path:
    """A bench-corpus session: tool output with keys and tokens to redact, paths, hashes, commands."""
    path = tmp_path / "bench.jsonl"
    path.write_bytes(session_bytes(size, 7)[0])
    return path


@pytest.mark.parametrize("which", ["bench", *[p.name for p in _sessions()]])
def test_a_compaction_from_prepared_shares_is_the_cold_one(which: str, tmp_path: Path) -> None:
    """The real sessions and a bench session (secrets in tool output): the engine given every message's stored
    share writes the summary, identifiers and quality a cold engine writes, and says all were prepared."""
    path = _bench_session(tmp_path) if which == "bench" else _real_dir() / which
    transcript = read_transcript(path)
    lines = _lines([m for e in transcript.entries if (m := _shown(e)) is not None])  # as the tailer stores
    settings_ = EngineSettings(keep_recent_turns=2, keep_recent_tokens=2_000)

    async def run(prepared: Any) -> Any:
        return await CompactionEngine(settings_).compact(transcript, now=NOW, prepared=prepared)

    import anyio

    cold = anyio.run(run, None)
    warm = anyio.run(run, lambda: lines)
    assert cold is not None and warm is not None
    # Every message is found but the results the repair makes up for calls that have none.
    plan = CompactionEngine(settings_).plan(transcript)
    assert plan is not None
    made_up = repair_tool_pairing(list(llm_visible(plan.to_summarize)), errored_policy="drop").report.added
    assert cold.prepared == 0 and warm.prepared == warm.span_messages - made_up > 0
    assert warm.summary == cold.summary
    assert warm.identifiers == cold.identifiers
    assert warm.quality == cold.quality and warm.level == cold.level


def test_secrets_never_reach_the_store(tmp_path: Path) -> None:
    """A share keeps the redacted copy, not the message: the store holds no secret the redaction removes."""
    secret = "sk-ant-" + "A1b2C3d4" * 4
    message = result(f"export ANTHROPIC_API_KEY={secret}\nwrote /srv/app/main.py")
    share = prepare(message, {})
    assert share.redacted is not None and secret not in orjson.dumps(share.redacted).decode()
    key = message_key(message)
    assert key is not None and secret.encode() not in encode(key, share)
    assert "/srv/app/main.py" in share.findings


# --- the store ------------------------------------------------------------------------------------------------
def _entries(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()[1:] if line.strip()]


def _size(entries: list[dict[str, Any]]) -> int:
    return sum(len(orjson.dumps(e)) + 1 for e in entries)


def test_a_batch_past_the_queue_bound_is_dropped_not_held(tmp_path: Path) -> None:
    """The thread far behind (or a batch too big): the batch is counted as dropped, never queued."""
    from compactd.sources.files.preparer import MAX_PENDING_BYTES

    session = str(tmp_path / "s.jsonl")
    preparer = Preparer(tmp_path / "state")
    preparer.start()
    big = [{"type": "message", "id": "a1", "message": user("see /srv/app/main.py")}]
    preparer.appended(session, big, MAX_PENDING_BYTES + 1)
    preparer.appended(session, big, _size(big))
    preparer.join(30)
    preparer.stop()
    assert preparer.dropped == 1 and preparer.prepared == 1


def test_the_preparer_stores_appended_messages_and_a_compaction_loads_them(tmp_path: Path) -> None:
    session = _bench_session(tmp_path, 120_000)
    state = tmp_path / "state"
    preparer = Preparer(state)
    preparer.start()
    entries = _entries(session)
    for i in range(0, len(entries), 3):
        preparer.appended(str(session), entries[i : i + 3], _size(entries[i : i + 3]))
    preparer.join(60)
    preparer.stop()
    shown = [m for e in entries if (m := e.get("message")) is not None]
    loaded = load_prepared(state, str(session))
    assert preparer.prepared == len(shown) == len(loaded)
    assert (store_path(state, str(session)).stat().st_mode & 0o777) == 0o600
    assert all(message_key(m) in loaded for m in llm_visible(shown))


def test_a_store_of_another_version_path_or_format_is_not_used(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    state = tmp_path / "state"
    message = user("look at /srv/app/main.py")
    key = message_key(message)
    assert key is not None
    line = encode(key, prepare(message, {}))
    store = store_path(state, str(session))
    store.parent.mkdir(parents=True)
    store.write_bytes(_header(str(session)) + line)
    assert list(load_prepared(state, str(session))) == [key]
    foreign = [
        orjson.dumps({"format": STORE_FORMAT, "version": "0.0.0", "path": str(session)}) + b"\n",
        orjson.dumps({"format": STORE_FORMAT + 1, "version": "x", "path": str(session)}) + b"\n",
        _header(str(tmp_path / "other.jsonl")),
        b"not json\n",
    ]
    for header in foreign:
        store.write_bytes(header + line)
        assert load_prepared(state, str(session)) == {}


@pytest.mark.parametrize(
    "bad",
    [
        b'["k", null, ["/a", 9999, 1]]',  # a kind code past the kinds
        b'["k", null, ["/a", 2]]',  # not three to a finding
        b'["k", null, [7, 2, 1]]',  # an identifier that is not text
        b'["k", null, ["/a", "2", 1]]',
        b'["k", "copy", []]',  # a copy that is not a message
        b'["k", null, ["/a", 2, 1]',  # torn
        b"[1, null, []]",
        b"{}",
    ],
)
def test_a_damaged_line_is_skipped_and_the_rest_used(bad: bytes, tmp_path: Path) -> None:
    session = str(tmp_path / "s.jsonl")
    state = tmp_path / "state"
    good = user("see /srv/app/main.py")
    key = message_key(good)
    assert key is not None
    store = store_path(state, session)
    store.parent.mkdir(parents=True)
    store.write_bytes(_header(session) + bad + b"\n" + encode(key, prepare(good, {})) + bad)
    assert list(load_prepared(state, session)) == [key]


def test_a_symlinked_store_is_not_followed(tmp_path: Path) -> None:
    session = str(tmp_path / "s.jsonl")
    state = tmp_path / "state"
    elsewhere = tmp_path / "elsewhere.jsonl"
    good = user("see /srv/app/main.py")
    key = message_key(good)
    assert key is not None
    elsewhere.write_bytes(_header(session) + encode(key, prepare(good, {})))
    preparer = Preparer(state)
    preparer.start()
    store = store_path(state, session)
    store.parent.mkdir(parents=True, exist_ok=True)
    store.symlink_to(elsewhere)
    assert load_prepared(state, session) == {}
    appended = [{"type": "message", "id": "a1", "message": user("and /etc/x.conf")}]
    preparer.appended(session, appended, _size(appended))
    preparer.join(30)
    preparer.stop()
    assert preparer.prepared == 0  # the append refused to write through it
    assert store.is_symlink() and elsewhere.read_bytes().count(b"\n") == 2


def test_a_store_that_outgrew_its_transcript_keeps_only_what_the_file_holds(tmp_path: Path) -> None:
    """After compactd's own rotation the file holds the kept turns only: the store is cut to them."""
    session = _bench_session(tmp_path, 1_500_000)  # a store well past the slack a small one is left with
    state = tmp_path / "state"
    preparer = Preparer(state)
    preparer.start()
    entries = _entries(session)
    preparer.appended(str(session), entries, _size(entries))
    preparer.join(60)
    header = session.read_bytes().splitlines()[0]
    kept = entries[-4:]
    session.write_bytes(b"\n".join([header, *(orjson.dumps(e) for e in kept)]) + b"\n")
    preparer.reloaded(str(session), session.stat().st_size)
    preparer.join(60)
    preparer.stop()
    loaded = load_prepared(state, str(session))
    wanted = {message_key(m) for m in llm_visible(e["message"] for e in kept if "message" in e)}
    assert set(loaded) == wanted and loaded


def test_stores_of_transcripts_that_are_gone_are_removed_by_the_sweep(tmp_path: Path) -> None:
    state = tmp_path / "state"
    here, gone = tmp_path / "here.jsonl", tmp_path / "gone.jsonl"
    here.write_text("")
    for path in (here, gone):
        store = store_path(state, str(path))
        store.parent.mkdir(parents=True, exist_ok=True)
        store.write_bytes(_header(str(path)))
    (state / "prepared" / "junk.jsonl").write_bytes(b"junk\n")
    preparer = Preparer(state)
    preparer.start()
    preparer.join(30)
    assert len(os.listdir(state / "prepared")) == 3  # not at once: a start-up has its own work
    preparer.sweep()
    preparer.join(30)
    preparer.stop()
    assert sorted(os.listdir(state / "prepared")) == [store_path(state, str(here)).name]


def test_a_store_removed_or_replaced_under_the_thread_is_started_over_with_its_header(tmp_path: Path) -> None:
    """The thread remembers a store it has checked; one removed since (with its directory) is made again, and one
    emptied is headed again, never appended to headless."""
    session = str(tmp_path / "s.jsonl")
    state = tmp_path / "state"
    preparer = Preparer(state)
    preparer.start()
    batches = [
        [{"type": "message", "id": f"a{i}", "message": user(f"see /srv/app/m{i}.py")}] for i in range(3)
    ]
    store = store_path(state, session)
    preparer.appended(session, batches[0], _size(batches[0]))
    preparer.join(30)
    shutil.rmtree(state / "prepared")
    preparer.appended(session, batches[1], _size(batches[1]))
    preparer.join(30)
    assert len(load_prepared(state, session)) == 1
    store.write_bytes(b"")
    preparer.appended(session, batches[2], _size(batches[2]))
    preparer.join(30)
    preparer.stop()
    assert store.read_bytes().startswith(_header(session))
    assert len(load_prepared(state, session)) == 1


# --- the daemon -------------------------------------------------------------------------------------------------
def test_the_daemon_prepares_what_an_agent_appends_and_compact_merges_it(
    tmp_path: Path,
    daemon_factory: Any,  # noqa: F811 (the fixture imported above)
) -> None:
    """The daemon (a subprocess, real watchers) follows a session an agent appends to; ``compactd compact`` with
    its state directory then finds every message of the span prepared and writes the cold compaction's summary."""
    from tests.test_service_e2e import wait_for

    d = daemon_factory()  # the session's model gets the default window: never due, the daemon only follows it
    d.root.mkdir(parents=True)
    data = session_bytes(300_000, 11)[0]
    lines = data.splitlines(keepends=True)
    path = d.root / "s.jsonl"
    path.write_bytes(lines[0])  # the header: every message after it arrives as an append
    d.start()
    d.wait_notice("READY=1")
    store = store_path(d.state, str(path))
    shown = 0
    for start in range(1, len(lines), 5):
        with path.open("ab") as f:
            f.write(b"".join(lines[start : start + 5]))
        shown += sum(1 for line in lines[start : start + 5] if b'"type":"message"' in line)

        def stored(at_least: int = shown) -> bool:
            return store.exists() and store.read_bytes().count(b"\n") - 1 >= at_least

        wait_for(stored, 60, f"{shown} messages prepared", d.proc)

    def counted() -> bool:
        metrics = (d.state / "metrics.prom").read_text() if (d.state / "metrics.prom").exists() else ""
        found = re.search(r"^compactd_prepared_messages_total (\S+)$", metrics, re.M)
        return found is not None and float(found.group(1)) == shown

    wait_for(counted, 60, "the metric to count them", d.proc)
    assert d.stop() == 0
    cold_dir = tmp_path / "cold"
    cold_dir.mkdir()
    cold = cold_dir / "s.jsonl"
    shutil.copyfile(path, cold)
    old = path.stat().st_mtime - 3600
    for p in (path, cold):
        os.utime(p, (old, old))
    cold_config = tmp_path / "cold.yaml"
    cold_config.write_text(json.dumps({**d.config, "state_dir": str(tmp_path / "cold-state")}))

    def compact(file: Path, config: Path) -> dict[str, Any]:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "compactd",
                "compact",
                str(file),
                "--json",
                "--force",
                "--config",
                str(config),
            ],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        return dict(json.loads(out.stdout))

    warm_result = compact(path, d.config_path)
    cold_result = compact(cold, cold_config)
    assert warm_result["committed"] and cold_result["committed"]
    assert warm_result["prepared"]["messages"] == warm_result["prepared"]["of"] > 0
    assert cold_result["prepared"]["messages"] == 0
    assert warm_result["summary"] == cold_result["summary"]
    assert warm_result["identifiers_total"] == cold_result["identifiers_total"]


def test_the_word_memo_is_forgotten_when_no_append_comes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The words remembered while an agent writes (up to ~20 MB) are not kept by an idle daemon."""
    import time

    from compactd.sources.files import preparer as module

    monkeypatch.setattr(module, "MEMO_IDLE_SECONDS", 3600.0)
    preparer = Preparer(tmp_path / "state")
    preparer.start()
    preparer.sweep()  # its first sweep done: a quiet spell now forgets the words
    appended = [{"type": "message", "id": "a1", "message": user("see /srv/app/main.py and deadbee1")}]
    preparer.appended(str(tmp_path / "s.jsonl"), appended, _size(appended))
    preparer.join(30)
    assert preparer.prepared == 1 and preparer._memo  # the thread now waits an hour for the next append
    monkeypatch.setattr(module, "MEMO_IDLE_SECONDS", 0.05)
    preparer.join(30)  # its next wait is the short one
    deadline = time.monotonic() + 30
    while preparer._memo and time.monotonic() < deadline:
        time.sleep(0.01)  # polling an observable condition, bounded by the deadline
    preparer.stop()
    assert not preparer._memo


def test_the_daemon_compacts_a_session_it_followed_from_what_it_prepared(
    daemon_factory: Any,  # noqa: F811 (the fixture imported above)
) -> None:
    """Followed while it grew, then over its threshold (a reload lowers the window): the daemon's own compaction
    finds every message of its span prepared (its log line and its metrics say so)."""
    import signal

    from tests.test_service_e2e import has_compaction, wait_for

    d = daemon_factory()  # the session's model gets the default window: far from its threshold
    d.root.mkdir(parents=True)
    lines = session_bytes(300_000, 12)[0].splitlines(keepends=True)
    last_turn = max(i for i, line in enumerate(lines) if b'"role":"user"' in line)
    path = d.root / "s.jsonl"
    path.write_bytes(lines[0])
    d.start()
    ready = d.wait_notice("READY=1")
    with path.open("ab") as f:
        f.write(b"".join(lines[1:last_turn]))
    shown = sum(1 for line in lines[1:last_turn] if b'"type":"message"' in line)
    store = store_path(d.state, str(path))
    wait_for(lambda: store.exists() and store.read_bytes().count(b"\n") - 1 >= shown, 60, "prepared", d.proc)
    d.config["agents"] = {"defaults": {"context_tokens": 40_000}}  # a cap on every window
    d.write_config(d.config)
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    d.wait_notice("READY=1", start=d.wait_notice("RELOADING=1", start=ready))
    with path.open("ab") as f:  # the agent's next turn, on the new window: over the threshold
        f.write(b"".join(lines[last_turn:]))
    wait_for(lambda: has_compaction(path), 60, "the compaction", d.proc)
    found = wait_for(
        lambda: re.search(r"compacted path=.* prepared=(\d+)/(\d+)", d.log()), 30, "its log", d.proc
    )
    assert int(found.group(1)) == int(found.group(2)) > 0

    def metric(name: str) -> float | None:
        text = (d.state / "metrics.prom").read_text() if (d.state / "metrics.prom").exists() else ""
        got = re.search(rf"^{name} (\S+)$", text, re.M)
        return float(got.group(1)) if got else None

    wait_for(lambda: metric("compactd_compaction_span_messages_total"), 30, "the span metric", d.proc)
    assert metric("compactd_compaction_span_messages_prepared_total") == metric(
        "compactd_compaction_span_messages_total"
    )
    assert d.stop() == 0


def test_the_word_memo_is_bounded_in_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages full of distinct words: the memo starts over once it holds about ``MEMO_MAX_BYTES``."""
    from compactd.sources.files import preparer as module

    monkeypatch.setattr(module, "MEMO_MAX_BYTES", 1 << 20)
    preparer = Preparer(tmp_path / "state")
    preparer.start()
    sizes = []
    for batch in range(4):
        words = " ".join(f"/srv/app{batch}/module{i}.py" for i in range(12_000))
        appended = [{"type": "message", "id": f"a{batch}", "message": result(words)}]
        preparer.appended(str(tmp_path / "s.jsonl"), appended, _size(appended))
        preparer.join(60)
        sizes.append(len(preparer._memo))
    preparer.stop()
    assert preparer.prepared == 4
    assert max(sizes) >= 12_000  # each message's words are remembered ...
    assert min(sizes[1:]) < 24_000  # ... but never two messages' worth: 24,000 of them are past 1 MiB
