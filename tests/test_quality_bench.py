"""The issue-18 quality bench (bench/quality): its generator, its scorer's rules, and a small run end to end.

The scorer must give full marks to intact facts, nothing to a category whose facts are gone, and refuse a
dump (a "summary" that is the whole transcript is over the budget and scores 0 %); the runner must compact
real sessions with ``compactd compact`` and report every category and the fill; and what compactd writes must
keep at least 95 % of every category, with the digest and with a model that drops every identifier, after one
compaction and after a chain of three (a small run here; ``python -m bench.quality`` runs the full one).
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from bench.quality.run import main, run
from bench.quality.score import notes, score, units
from bench.quality.sessions import CATEGORIES, PHASES, generate, session_bytes

THRESHOLD = 16_000  # the runner's: a 36,000-token window less the 20,000 reserve


def notes_summary(text: str) -> list[dict[str, object]]:
    return [{"role": "compactionSummary", "summary": text, "tokensBefore": 40_000}]


def test_sessions_are_seeded_and_spread_their_facts() -> None:
    session = generate(7)
    assert session_bytes(session) == session_bytes(generate(7))
    assert session_bytes(session) != session_bytes(generate(8))
    lines = [json.loads(line) for line in session_bytes(session).splitlines()]
    assert lines[0]["type"] == "session" and lines[0]["version"] == 3
    ids = {line["id"] for line in lines[1:]}
    assert all(line["parentId"] in ids or line["parentId"] is None for line in lines[1:])
    assert {a.category for a in session.answers} == set(CATEGORIES)
    assert {a.phase for a in session.answers} == set(PHASES)
    assert any(a.stale for a in session.answers if a.category == "correction")
    # The tail (the turns a compaction keeps) holds no answer.
    tail = score(session.messages(session.body_turns), session.answers, THRESHOLD)
    assert tail.found == dict.fromkeys(CATEGORIES, 0)


def test_intact_facts_score_full_marks() -> None:
    session = generate(3)
    ideal = score(notes_summary(notes(session.answers)), session.answers, THRESHOLD)
    assert ideal.percent("exact") == 100.0, ideal.missed
    assert all(ideal.percent(c) == 100.0 for c in CATEGORIES), ideal.missed
    assert not ideal.over_budget
    # The uncompacted transcript states every fact that was never corrected, beside its subject.
    whole = score(session.messages(), session.answers, THRESHOLD)
    for category in ("exact", "relational", "tool"):
        assert whole.percent(category, raw=True) == 100.0, [m for m in whole.missed if m.category == category]


@pytest.mark.parametrize("category", CATEGORIES)
def test_a_category_without_its_facts_scores_zero(category: str) -> None:
    session = generate(4)
    kept = [a for a in session.answers if a.category != category]
    result = score(notes_summary(notes(kept)), session.answers, THRESHOLD)
    assert result.percent(category) == 0.0
    assert all(result.percent(c) == 100.0 for c in CATEGORIES if c != category)


def test_a_value_away_from_its_subject_or_superseded_does_not_count() -> None:
    session = generate(5)
    answers = [a for a in session.answers if a.stale]
    assert {a.category for a in answers} == {"correction", "task"}
    # The values listed alone, without their subjects (as a bare identifier list does).
    bare = "\n".join(f"- `{a.value}`" for a in answers)
    assert score(notes_summary(bare), answers, THRESHOLD).found == dict.fromkeys(CATEGORIES, 0)
    # The corrected value beside its subject, but the superseded one presented as current beside it too.
    both = "\n".join(f"- {' '.join(a.subject)}: {a.value}, {a.stale[0]}" for a in answers)
    assert score(notes_summary(both), answers, THRESHOLD).found == dict.fromkeys(CATEGORIES, 0)
    # Marked as past, it is history: the answer counts.
    marked = "\n".join(f"- {' '.join(a.subject)}: {a.value} (previously {a.stale[0]})" for a in answers)
    assert score(notes_summary(marked), answers, THRESHOLD).missed == []


def test_a_dump_is_refused() -> None:
    session = generate(6)
    dump = "\n".join(units(session.messages()))
    result = score(notes_summary(dump), session.answers, THRESHOLD)
    assert result.over_budget and result.fill > 1.0
    assert all(result.percent(c) == 0.0 for c in CATEGORIES)
    assert result.as_dict()["over_budget"] is True
    # Even with the budget set aside, a dump presents corrected values and old task states as current.
    assert result.percent("correction", raw=True) == 0.0
    assert (result.percent("task", raw=True) or 0.0) < 50.0


def test_the_runner_compacts_and_reports_every_category(tmp_path: Path) -> None:
    results = run(1, 12_000, 11, ["digest"], workdir=tmp_path)
    runs = results["modes"]["digest"]
    assert set(runs) == {"one", "chain3"}
    for figures in runs.values():
        assert set(figures["percent"]) == set(CATEGORIES)
        assert all(0.0 <= p <= 100.0 for p in figures["percent"].values())
        assert all(figures["total"][c] > 0 for c in CATEGORIES)
        assert 0.0 < figures["fill_max"] < 1.0 and figures["over_budget"] == 0
        phases = figures["by_phase"]
        assert sum(p["total"] for p in phases.values()) == sum(figures["total"].values())
        assert sum(p["found"] for p in phases.values()) == sum(figures["found"].values())
    assert runs["one"]["routes"] == ["compact_only"]
    assert runs["chain3"]["routes"][0].count("+") == 2  # three compactions
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--smoke", "--modes", "digest,real_model", "--no-chain", "--json"]) == 0
    printed = json.loads(out.getvalue())
    assert set(printed["modes"]["digest"]["one"]["percent"]) == set(CATEGORIES)
    assert "skipped" in printed["modes"]["real_model"] or "one" in printed["modes"]["real_model"]


@pytest.mark.parametrize("seed", [21, 22])
def test_what_compactd_writes_keeps_every_category(tmp_path: Path, seed: int) -> None:
    results = run(1, 24_000, seed, ["digest", "drop_ids"], workdir=tmp_path)
    for mode, runs in results["modes"].items():
        for name, figures in runs.items():
            low = {c: p for c, p in figures["percent"].items() if p < 95.0}
            assert not low, (mode, name, low)
            assert figures["over_budget"] == 0 and figures["fill_max"] < 0.6, (
                mode,
                name,
                figures["fill_max"],
            )
