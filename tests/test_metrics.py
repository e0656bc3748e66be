"""The metrics an operator reads: valid for promtool, counters present from the start, per-session series
bounded, the build identified, and a session's gauge following its commit (issue 20, item 6)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess

import pytest
from compactd import __version__
from compactd.state import Metrics

from tests.test_state import NOW, family_of, parse_prom, recorded_metrics


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool missing in CI: .ci/ensure-promtool installs Debian's prometheus package")
        pytest.skip("promtool not installed (apt-get install --no-install-recommends prometheus)")
    return found


@pytest.mark.parametrize("which", ["recorded", "empty", "many sessions"])
def test_promtool_check_metrics_passes(which: str) -> None:
    """promtool's own linter (metric names, suffixes, units, HELP/TYPE), the check an operator runs."""
    promtool = _promtool()
    if which == "recorded":
        metrics = recorded_metrics()
    elif which == "empty":
        metrics = Metrics(started_at=NOW)
    else:
        metrics = Metrics(started_at=NOW, session_series=3)
        for i in range(20):
            metrics.set_session(f"/r/s{i}.jsonl", session_id=f"id-{i}", tokens=i * 100, window=10_000)
    text = metrics.render(now=NOW)
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_promtool_rejects_what_it_should() -> None:
    """The checker is strict: a counter named with a type word (the old name) fails it."""
    promtool = _promtool()
    bad = (
        "# HELP compactd_identifiers_in_summary_total x\n"
        "# TYPE compactd_identifiers_in_summary_total counter\n"
        "compactd_identifiers_in_summary_total 1\n"
    )
    done = subprocess.run([promtool, "check", "metrics"], input=bad, capture_output=True, text=True)
    assert done.returncode != 0 and "summary" in (done.stdout + done.stderr)


def test_counters_start_at_zero() -> None:
    _h, types, samples = parse_prom(Metrics(started_at=NOW).render(now=NOW))
    series = {(n, tuple(sorted(lab.items()))): v for n, lab, v in samples}
    for action in ("read", "claim", "flush", "compact", "commit", "seal"):
        assert series[("compactd_failures_total", (("action", action),))] == 0
    for route, level in (("compact_only", "llm"), ("compact_then_truncate", "digest")):
        assert series[("compactd_compactions_total", (("level", level), ("route", route)))] == 0
    assert series[("compactd_digest_fallbacks_total", ())] == 0
    # every counter family has a series before anything happened
    counters = {f for f, kind in types.items() if kind == "counter"}
    assert counters == {family_of(n, types) for n, _l, _v in samples if family_of(n, types) in counters}


def test_build_info() -> None:
    _h, types, samples = parse_prom(Metrics(started_at=NOW).render(now=NOW))
    assert types["compactd_build_info"] == "gauge"
    [(labels, value)] = [(lab, v) for n, lab, v in samples if n == "compactd_build_info"]
    assert value == 1 and labels == {"version": __version__, "python": platform.python_version()}


def test_per_session_series_are_the_fullest_sessions_plus_totals() -> None:
    metrics = Metrics(started_at=NOW, session_series=3)
    fills = [5, 90, 40, 70, 10, 85]  # percent of a 1,000-token window
    for i, fill in enumerate(fills):
        metrics.set_session(f"/r/s{i}.jsonl", session_id=f"id-{i}", tokens=fill * 10, window=1000)
    metrics.set_session("/r/big.jsonl", session_id="big", tokens=5000, window=200_000)  # many tokens, 2.5 %
    _h, _t, samples = parse_prom(metrics.render(now=NOW))
    shown = {lab["session_id"] for n, lab, _v in samples if n == "compactd_session_tokens"}
    assert shown == {"id-1", "id-5", "id-3"}  # 90 %, 85 %, 70 %
    windows = {lab["session_id"] for n, lab, _v in samples if n == "compactd_session_context_window"}
    assert windows == shown
    values = {n: v for n, lab, v in samples if not lab}
    assert values["compactd_sessions_tokens"] == sum(f * 10 for f in fills) + 5000
    assert values["compactd_session_series_omitted"] == 4
    metrics.session_series = 0
    _h, _t, samples = parse_prom(metrics.render(now=NOW))
    assert not [s for s in samples if s[0] == "compactd_session_tokens"]
