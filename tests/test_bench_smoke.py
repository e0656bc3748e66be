"""The benchmarks run end to end at tiny sizes, so CI proves they work.

Structure and exactness only (bytes read == bytes appended, every append seen, no reload): speed is what the
benchmarks measure when run by hand (bench/README.md), never asserted here.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from compactd.core.ledger import SessionLedger
from compactd.reading import read_transcript

from bench import (
    bench_cli,
    bench_compact,
    bench_costs,
    bench_extract,
    bench_followed,
    bench_json5,
    bench_loop,
    bench_provider,
    bench_read,
    bench_service,
    bench_tail,
    corpus,
)

pytestmark = pytest.mark.timeout(120)


def test_corpus_is_deterministic_and_loads_cleanly(tmp_path: Path) -> None:
    stats = corpus.generate_session(tmp_path / "a.jsonl", 120_000, seed=5)
    corpus.generate_session(tmp_path / "b.jsonl", 120_000, seed=5)
    corpus.generate_session(tmp_path / "c.jsonl", 120_000, seed=6)
    data = (tmp_path / "a.jsonl").read_bytes()
    assert data == (tmp_path / "b.jsonl").read_bytes()
    assert data != (tmp_path / "c.jsonl").read_bytes()
    assert stats.bytes == len(data) >= 120_000

    transcript = read_transcript(tmp_path / "a.jsonl")
    assert transcript.problems == []
    assert transcript.header is not None and transcript.header["version"] == 3
    kinds = [e["type"] for e in transcript.entries]
    assert kinds[:2] == ["model_change", "thinking_level_change"]
    previous = None
    for entry in transcript.entries:  # one unbroken parentId chain of 8-hex ids
        assert re.fullmatch(r"[0-9a-f]{8}", entry["id"])
        assert entry["parentId"] == previous
        previous = entry["id"]
    messages = [e["message"] for e in transcript.entries if e["type"] == "message"]
    roles = {m["role"] for m in messages}
    assert roles == {"user", "assistant", "toolResult"}
    blocks = [b for m in messages if m["role"] == "assistant" for b in m["content"]]
    assert {"text", "toolCall"} <= {b["type"] for b in blocks}
    assert any(
        isinstance(b.get("arguments"), dict) and b["arguments"] for b in blocks if b["type"] == "toolCall"
    )
    assert any("usage" in m and m["usage"]["totalTokens"] > 0 for m in messages if m["role"] == "assistant")
    ledger = SessionLedger.from_transcript(transcript)
    assert ledger.tokens > 0 and ledger.entries > 0


def test_corpus_cli_writes_the_files_it_reports(tmp_path: Path) -> None:
    stats = corpus.main([str(tmp_path / "corpus"), "--files", "4", "--mb", "0.2", "--seed", "3"])
    files = sorted((tmp_path / "corpus").glob("*.jsonl"))
    assert stats["files"] == len(files) == 4
    assert stats["bytes"] == sum(f.stat().st_size for f in files)
    assert 0 < stats["tool_result_byte_share"] < 1
    assert stats["lines"] == sum(f.read_bytes().count(b"\n") for f in files)


@pytest.mark.slow  # processes, pi or many examples: left to the full run
def test_bench_read_smoke() -> None:
    result = bench_read.main(["--smoke", "--breakdown"])
    assert result["files"] == 3 and result["bytes"] > 0 and result["lines"] > 0
    assert result["orjson_mb_s"] > 0 and result["ledger_mb_s"] > 0
    assert result["ratio"] == pytest.approx(result["ledger_mb_s"] / result["orjson_mb_s"], rel=0.01)
    assert result["meets_target"] == (result["ratio"] >= bench_read.TARGET_RATIO)
    assert result["breakdown"]["orjson.loads (pre-split lines)"] == 1.0
    assert all(factor > 0 for factor in result["breakdown"].values())


def test_bench_costs_smoke() -> None:
    result = bench_costs.main(["--smoke", "--json"])
    assert result["openclaw"]["many"]["sessions"] == 60 and result["openclaw"]["few"]["sessions"] == 6
    assert result["giant_line"]["read_over_appended"] <= 2.0
    assert result["giant_line"]["baseline_read_over_appended"] == 1.0
    assert result["cold_read"]["many"]["change"] == "reloaded"  # 2,000 lines: under the caps


def test_bench_tail_smoke() -> None:
    result = bench_tail.main(["--smoke"])
    appends = result["appends"]
    assert appends == 20
    assert result["bytes_read_per_update"] == {"big": [1024], "small": [1024]}
    assert result["bytes_read_equals_appended"] is True
    assert result["updates_exact"] == {"big": appends, "small": appends}
    assert result["reloads_during_appends"] == {"big": 0, "small": 0}
    assert result["ledger_matches_full_read"] == {"big": True, "small": True}
    assert result["big"]["median_us"] > 0 and result["small"]["median_us"] > 0
    assert result["full_reparse_big_ms"] > 0


@pytest.mark.slow  # processes, pi or many examples: left to the full run
def test_bench_service_smoke() -> None:
    result = bench_service.main(["--smoke"])
    latency = result["latency"]
    assert latency["writes"] == 50
    assert latency["missed"] == 0
    assert latency["bytes_read"] == latency["bytes_appended"] == 50 * bench_service.LINE_BYTES
    assert latency["reloads"] == 0
    assert latency["median_ms"] > 0 and latency["p99_ms"] >= latency["median_ms"]
    idle = result["idle"]
    assert idle["sessions"] == 20 and idle["watchers"] == 1
    assert idle["refresh_calls_while_idle"] == 0
    assert idle["cpu_percent"] >= 0
    memory = result["memory"]
    assert memory["sessions_loaded"] == 50
    assert memory["rss_mb"] > 0 and memory["peak_rss_mb"] >= memory["rss_mb"]
    assert isinstance(memory["per_session_bytes"], int)


@pytest.mark.slow  # four compactd processes
def test_bench_compact_baseline_smoke() -> None:
    """``--baseline``: each case compacted by both trees (here ours twice), both committed, the ratios given."""
    rows = bench_compact.main(
        ["--smoke", "--baseline", str(bench_compact.REPO / "daemon"), "--rounds", "1", "--json"]
    )
    assert [r["case"] for r in rows] == ["session", "orphans"]
    for row in rows:
        assert row["ours"]["committed"] and row["baseline"]["committed"]
        assert row["cpu_ratio"] > 0 and row["rss_ratio"] > 0


def test_bench_followed_smoke() -> None:
    """A session prepared as appended (every message, none dropped), then compacted followed and cold: both
    commit the same summary, the followed one with every span message prepared but the repair's."""
    row = bench_followed.main(["--smoke", "--json"])
    assert row["messages"] > 0 and row["dropped"] == 0 and row["prepare_cpu_s"] > 0
    assert row["followed"]["committed"] and row["cold"]["committed"] and row["same_summary"]
    found, of = row["followed"]["prepared"]
    assert 0 < found <= of and tuple(row["cold"]["prepared"]) == (0, of)
    assert row["bare_read_fresh_s"] > 0 and row["followed_over_fresh_bare"] > 0


def test_bench_extract_smoke() -> None:
    """Two children (our tree twice when no baseline is given) redact and extract the same session: the same
    records, found and timed."""
    result = bench_extract.main(["--smoke", "--json"])
    assert result["records_equal"]
    assert result["ours"]["identifiers"] == result["baseline"]["identifiers"] > 0
    assert result["ours"]["extract_s"] > 0 and result["baseline"]["redact_s"] > 0
    assert result["sections_equal"] and result["ours"]["digest_s"] > 0 and result["ours"]["state_s"] > 0


@pytest.mark.slow  # eight compactd and python processes
def test_bench_cli_smoke() -> None:
    result = bench_cli.main(["--smoke"])
    assert result["corpus_files"] == 3 and result["corpus_bytes"] > 0 and result["big_bytes"] > 0
    assert set(result["measures"]) == {"once --dry-run", "inspect"}
    for measure in result["measures"].values():
        assert measure["ours_cpu_s"] > 0 and measure["bare_cpu_s"] > 0
        assert measure["ratio"] == pytest.approx(measure["bare_cpu_s"] / measure["ours_cpu_s"], rel=0.02)
        assert measure["meets_target"] == (measure["ratio"] >= bench_cli.TARGET_RATIO)
    assert result["measures"]["inspect"]["command"].startswith("-m compactd inspect ")


@pytest.mark.slow  # twelve compactd and python processes
def test_bench_cli_smoke_with_a_baseline() -> None:
    """``--baseline`` adds the other tree as a third side of the same rounds (here this tree itself)."""
    result = bench_cli.main(["--smoke", "--baseline", str(Path(bench_cli.__file__).parents[1] / "daemon")])
    for measure in result["measures"].values():
        assert measure["base_cpu_s"] > 0
        assert measure["ours_vs_base"] == pytest.approx(
            measure["ours_cpu_s"] / measure["base_cpu_s"], rel=0.02
        )
        assert measure["base_ratio"] == pytest.approx(measure["bare_cpu_s"] / measure["base_cpu_s"], rel=0.02)


@pytest.mark.slow  # eight compactd and python processes, and one listing the modules it loaded
def test_bench_cli_smoke_in_parts() -> None:
    """``--parts`` adds the dry run's start with its imports, and its reading, as sides of the same rounds; the
    imports side loads what the dry run loaded (its configuration reader among them), nothing else."""
    result = bench_cli.main(["--smoke", "--parts", "--only", "once --dry-run"])
    measure = result["measures"]["once --dry-run"]
    assert set(measure["parts_cpu_s"]) == {"start + imports", "reading"}
    for side, cpu in measure["parts_cpu_s"].items():
        assert cpu > 0
        assert measure["bare_over_parts"][side] == pytest.approx(measure["bare_cpu_s"] / cpu, rel=0.02)
    assert "inspect" not in result["measures"]


def test_the_imports_side_loads_what_the_dry_run_loaded(tmp_path: Path) -> None:
    config = bench_cli.write_config(tmp_path, [tmp_path / "sessions"])
    (tmp_path / "sessions").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "COMPACTD_CONFIG")}
    loaded = bench_cli._modules_loaded(
        [sys.executable, "-c", bench_cli.MODULES_OF, "once", "--dry-run", "--config", str(config)], env
    )
    assert {"compactd.commands.cli", "compactd.service", "compactd.config._schema", "orjson"} <= set(loaded)
    assert "__main__" not in loaded and "compactd.summarize.llm" not in loaded


def test_bench_json5_smoke() -> None:
    result = bench_json5.main(["--smoke"])
    assert result["json5_bytes"] >= 16 * 1024 and result["json_bytes"] > 0
    assert set(result["ratios"]) == {"json", "json5_same_bytes", "json5", "cached"}
    assert all(seconds >= 0 for seconds in result["seconds"].values())
    assert result["json5_package"]["bytes"] >= 2 * 1024


@pytest.mark.slow  # six compactd processes
def test_bench_provider_smoke() -> None:
    rows = bench_provider.main(["--smoke", "--json"])
    assert [r["case"] for r in rows] == list(bench_provider.SHAPES)
    for row in rows:
        assert row["exit"] == 0 and row["level"] == "digest"
        assert row["bytes"] >= 250_000 and row["rss_bytes"] > 0 and row["small_rss_bytes"] > 0
        assert row["rss_over_size"] == pytest.approx(
            (row["rss_bytes"] - row["small_rss_bytes"]) / row["bytes"], abs=0.01
        )


@pytest.mark.slow  # two compactd processes
def test_bench_loop_smoke() -> None:
    result = bench_loop.main(["--smoke", "--json"])
    daemon = result["daemon"]
    assert daemon["max_gap_seconds"] > 0 and daemon["max_gap_ratio"] > 0
    assert daemon["append_idle_median_ms"] > 0 and daemon["appends_during_job"] >= 0
    offload = result["offload"]
    assert offload["thread_job_seconds"] > 0 and offload["thread_loop_max_late_ms"] >= 0
    assert offload["process_pickle_size_ratio"] > 0
