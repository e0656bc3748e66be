"""The one module of timestamp formats: each matches what its reader (JavaScript, OpenClaw, a human) expects."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from compactd.commit.atomic import utc_stamp
from compactd.commit.retention import archive_time
from compactd.core.timestamps import (
    archive_stamp,
    iso_seconds,
    js_iso,
    local_iso_ms,
    parse_archive_stamp,
    parse_iso,
)

EPOCH = 1_709_641_800.123  # 2024-03-05T12:30:00.123Z


def test_js_iso_is_date_to_iso_string() -> None:
    assert js_iso(EPOCH) == "2024-03-05T12:30:00.123Z"
    assert js_iso(datetime.fromtimestamp(EPOCH, timezone(timedelta(hours=5)))) == "2024-03-05T12:30:00.123Z"
    assert js_iso(0) == "1970-01-01T00:00:00.000Z"
    now = js_iso()
    assert abs(parse_iso(now) - time.time()) < 5  # type: ignore[operator]


def test_archive_stamps_round_trip_through_retention() -> None:
    stamp = archive_stamp(EPOCH)
    assert stamp == "2024-03-05T12-30-00.123Z" == utc_stamp(EPOCH)
    assert parse_archive_stamp(f"x.jsonl.bak.{stamp}") == pytest.approx(EPOCH, abs=1e-3)
    assert archive_time(f"/s/x.jsonl.bak.{stamp}") == pytest.approx(EPOCH, abs=1e-3)
    assert archive_time(f"/s/x.jsonl.bak.{stamp}.tmp") is None  # only a name that ends in the stamp
    assert parse_archive_stamp("2024-13-05T12-30-00.123Z") is None


def test_iso_seconds_and_parse_iso() -> None:
    assert iso_seconds(EPOCH) == "2024-03-05T12:30:00+00:00"
    assert iso_seconds(EPOCH, zulu=True) == "2024-03-05T12:30:00Z"
    assert parse_iso("2024-03-05T12:30:00+00:00") == int(EPOCH)
    assert parse_iso("2024-03-05T12:30:00Z") == int(EPOCH)
    assert parse_iso("2024-03-05T12:30:00") == int(EPOCH)  # naive: UTC, as compactd writes it
    assert parse_iso("nonsense") is None and parse_iso(17) is None


def test_a_naive_time_is_local_where_its_writer_meant_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        assert parse_iso("2024-03-05T18:00:00", naive="local") == int(EPOCH)
        assert local_iso_ms(datetime(2024, 3, 5, 18, 0, 0, 123000)) == "2024-03-05T18:00:00.123+05:30"
        assert local_iso_ms(datetime.fromtimestamp(EPOCH, UTC)) == "2024-03-05T12:30:00.123+00:00"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert os.environ.get("TZ") is None
