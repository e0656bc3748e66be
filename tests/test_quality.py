"""Quality guard checks, heading repair, choice between attempts, fallback summary."""

from __future__ import annotations

import pytest
from compactd.summarize.headings import REQUIRED_HEADINGS
from compactd.summarize.quality import (
    NO_PRIOR_HISTORY,
    QualityReport,
    ask_keywords,
    better,
    check_summary,
    fallback_summary,
    has_headings_in_order,
    repair_headings,
    score,
)
from hypothesis import given, settings
from hypothesis import strategies as st

D, T, C, P, X = REQUIRED_HEADINGS


def full(**bodies: str) -> str:
    """A summary with every heading; keyword bodies by initial (d, t, c, p, x)."""
    keys = "dtcpx"
    return "\n\n".join(f"{h}\n{bodies.get(k, 'None.')}" for h, k in zip(REQUIRED_HEADINGS, keys, strict=True))


# --- headings -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("summary", "missing"),
    [
        (full(), []),
        (full().replace(f"{T}\n", ""), [T]),  # missing heading
        (full().replace(D, D + "   \t"), []),  # trailing spaces are trimmed
        (full().replace(C, "  " + C), []),  # leading spaces too
        (full().replace(f"{P}\n", f"The user asked under {P} for more.\n"), [P]),  # inside prose: not a line
        (full().replace(X, "## exact identifiers"), [X]),  # case differs: not exact
        (full().replace(X, "### Exact identifiers"), [X]),  # level differs: not exact
        (full().replace(D, f"**{D}**"), [D]),
        ("", list(REQUIRED_HEADINGS)),
    ],
    ids=[
        "complete",
        "missing",
        "trailing-spaces",
        "leading-spaces",
        "in-prose",
        "case",
        "level",
        "bold",
        "empty",
    ],
)
def test_heading_check(summary: str, missing: list[str]) -> None:
    report = check_summary(summary, latest_ask=None, identifiers=None)
    assert [r for r in report.reasons if r.startswith("missing_section:")] == [
        f"missing_section:{h}" for h in missing
    ]
    assert report.ok is (not missing)
    for heading in REQUIRED_HEADINGS:
        assert report.checks[f"section:{heading}"] is (heading not in missing)
    assert score(report) == len(missing)


# --- identifiers --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "identifiers", "policy", "missing"),
    [
        ("/srv/app/main.py and abc1234def", ["/srv/app/main.py", "ABC1234DEF"], "strict", []),  # hex case
        ("commit 0A1B2C3D4E", ["0a1b2c3d4e"], "strict", []),
        ("uuid 123E4567-E89B-12D3-A456-426614174000", ["123e4567-e89b-12d3-a456-426614174000"], "strict", []),
        ("see /srv/app", ["/srv/app/main.py"], "strict", ["/srv/app/main.py"]),
        ("see /SRV/APP/MAIN.PY", ["/srv/app/main.py"], "strict", ["/srv/app/main.py"]),  # paths are exact
        ("nothing", ["/a/b", "https://x.example/y"], "strict", ["/a/b", "https://x.example/y"]),
        ("nothing", ["/a/b"], "off", None),  # not checked
        ("nothing", ["/a/b"], "custom", None),
        ("nothing", [], "strict", None),
        ("nothing", None, "strict", None),
    ],
)
def test_identifier_check(
    body: str, identifiers: list[str] | None, policy: str, missing: list[str] | None
) -> None:
    report = check_summary(full(x=body), latest_ask=None, identifiers=identifiers, policy=policy)
    if missing is None:
        assert "identifiers" not in report.checks
        assert report.ok
        return
    assert report.checks["identifiers"] is (not missing)
    assert report.missing_identifiers == missing
    if missing:
        assert report.reasons == ["missing_identifiers:" + ", ".join(missing)]
    else:
        assert report.ok


def test_identifier_reason_names_the_first_few() -> None:
    idents = [f"/data/file{i}.csv" for i in range(9)]
    report = check_summary(full(), latest_ask=None, identifiers=idents)
    assert report.reasons == ["missing_identifiers:" + ", ".join(idents[:5]) + " (+4 more)"]
    assert report.missing_identifiers == idents


# --- latest ask ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ask", "pending", "reflected"),
    [
        ("Please migrate the billing service to Postgres", "Migrate billing to Postgres.", True),
        ("Please migrate the billing service to Postgres", "Refactor the logger.", False),
        # Only one keyword matches while three exist: two are needed.
        ("Please migrate the billing service to Postgres", "Postgres is slow.", False),
        # Fewer than three keywords: one match is enough.
        ("Fix tests", "The tests are green.", True),
        ("请把数据库迁移脚本改成异步", "把数据库迁移脚本改成异步执行。", True),
        ("请把数据库迁移脚本改成异步", "整理日志格式。", False),
        ("データベースの移行スクリプトを直して", "データベース移行スクリプトを修正中。", True),
        # Full-width letters are NFKC-normalized before comparing.
        ("Ｄｅｐｌｏｙ ｔｏ ｓｔａｇｉｎｇ", "Deploy to staging pending.", True),
        # Only stopwords and one-character tokens: nothing to reflect.
        ("Can you do it?", "Unrelated.", True),
    ],
)
def test_latest_ask_reflected(ask: str, pending: str, reflected: bool) -> None:
    report = check_summary(full(p=pending), latest_ask=ask, identifiers=None)
    assert report.checks["latest_user_ask"] is reflected
    assert ("latest_user_ask_not_reflected" in report.reasons) is (not reflected)


def test_ask_keywords_rules() -> None:
    assert ask_keywords("Please update the README and the CI config a b") == [
        "update",
        "readme",
        "ci",
        "config",
    ]
    assert ask_keywords("Run src/main.py with --verbose") == ["run", "src", "main.py", "verbose"]
    assert ask_keywords("修复") == ["修复"]
    assert ask_keywords("修") == []  # a one-character CJK run is too short
    long_ask = " ".join(f"word{i}" for i in range(30))
    assert len(ask_keywords(long_ask)) == 12
    assert ask_keywords("deploy deploy DEPLOY") == ["deploy"]


def test_no_ask_means_no_ask_check() -> None:
    for ask in (None, "", "   "):
        report = check_summary(full(), latest_ask=ask, identifiers=None)
        assert "latest_user_ask" not in report.checks


# --- choosing between attempts ------------------------------------------------------------------------------
def _report(failed: int) -> QualityReport:
    checks = {f"c{i}": i >= failed for i in range(7)}
    return QualityReport(ok=failed == 0, reasons=["x"] * failed, checks=checks)


def test_better_prefers_fewer_failed_checks_and_the_later_on_ties() -> None:
    first, second = _report(2), _report(1)
    assert better(first, second) is second
    assert better(second, first) is second
    tie_a, tie_b = _report(1), _report(1)
    assert better(tie_a, tie_b) is tie_b


def test_score_counts_failures_across_checks() -> None:
    summary = full().replace(f"{T}\n", "")
    report = check_summary(summary, latest_ask="rename the billing module to payments", identifiers=["/x/y"])
    assert score(report) == 3
    assert not report.ok


# --- repair -------------------------------------------------------------------------------------------------
REPAIR_CASES = {
    "empty": "",
    "prose-only": "The agent migrated the DB.\nIt used /srv/db/migrate.sql.",
    "missing-middle": f"{D}\nUse Postgres.\n\n{C}\nNo force pushes.\n\n{X}\n/srv/db",
    "out-of-order": f"{X}\n/srv/db\n\n{D}\nUse Postgres.",
    "preamble-before-decisions": f"Intro line.\n\n{T}\nWrite tests.\n\n{D}\nUse Postgres.",
    "near-miss": "### decisions\nUse Postgres.\n\n**Open TODOs:**\n- tests\n\nPending user asks:\n- deploy",
    "in-prose": f"We noted {D} somewhere.\n{P}\n- ship it",
    "trailing-spaces": full().replace(D, D + "  "),
    "complete": full(d="Use Postgres."),
    "duplicate": f"{D}\na\n\n{D}\nb",
    "fenced": f"{D}\n```\ncode {T}\n```",
}


@pytest.mark.parametrize("name", list(REPAIR_CASES))
def test_repair_adds_every_heading_keeps_text_and_is_idempotent(name: str) -> None:
    original = REPAIR_CASES[name]
    repaired = repair_headings(original)
    assert check_summary(repaired, latest_ask=None, identifiers=None).ok
    assert repair_headings(repaired) == repaired
    # Every non-blank line the model wrote survives (headings may be normalized to their exact form).
    near_misses = {"### decisions", "**Open TODOs:**", "Pending user asks:"}
    repaired_lines = [line.strip() for line in repaired.splitlines()]
    for line in original.splitlines():
        stripped = line.strip()
        if stripped and stripped not in near_misses:
            assert stripped in repaired_lines, (name, stripped)


def test_repair_leaves_a_complete_summary_untouched() -> None:
    for summary in (full(d="Use Postgres."), full().replace(D, D + "  ")):
        assert repair_headings(summary) == summary


def test_repair_puts_missing_headings_in_place_with_none() -> None:
    repaired = repair_headings(REPAIR_CASES["missing-middle"])
    assert repaired == (
        f"{D}\nUse Postgres.\n\n{T}\nNone.\n\n{C}\nNo force pushes.\n\n{P}\nNone.\n\n{X}\n/srv/db"
    )


def test_repair_does_not_reorder_what_the_model_wrote() -> None:
    repaired = repair_headings(REPAIR_CASES["out-of-order"])
    lines = repaired.splitlines()
    assert lines.index(X) < lines.index(D)
    assert lines.index("/srv/db") < lines.index("Use Postgres.")
    # Missing headings follow the closest earlier heading that is present.
    assert lines.index(D) < lines.index(T) < lines.index(C) < lines.index(P)


def test_repair_moves_unheaded_leading_text_under_decisions() -> None:
    assert repair_headings(REPAIR_CASES["prose-only"]).startswith(
        f"{D}\nThe agent migrated the DB.\nIt used /srv/db/migrate.sql.\n\n{T}\nNone."
    )
    repaired = repair_headings(REPAIR_CASES["preamble-before-decisions"])
    assert repaired.startswith(f"{T}\nWrite tests.\n\n")
    assert f"{D}\nIntro line.\n\nUse Postgres." in repaired
    assert repaired.count("Intro line.") == 1


def test_repair_turns_near_miss_headings_into_exact_ones() -> None:
    repaired = repair_headings(REPAIR_CASES["near-miss"])
    lines = repaired.splitlines()
    assert lines.count(D) == lines.count(T) == lines.count(P) == 1
    assert lines[lines.index(D) + 1] == "Use Postgres."
    assert lines[lines.index(T) + 1] == "- tests"
    assert lines[lines.index(P) + 1] == "- deploy"


def test_repair_of_empty_summary_is_all_none() -> None:
    assert repair_headings("") == "\n\n".join(f"{h}\nNone." for h in REQUIRED_HEADINGS)


@pytest.mark.slow  # hypothesis-heavy
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from([*REQUIRED_HEADINGS, "", "   ", "Decisions:", "## Goal", "**Open TODOs**"]),
            st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40),
        ),
        max_size=14,
    )
)
def test_repair_property(lines: list[str]) -> None:
    original = "\n".join(lines)
    repaired = repair_headings(original)
    assert check_summary(repaired, latest_ask=None, identifiers=None).ok
    assert repair_headings(repaired) == repaired
    # Nothing the model wrote is lost: every non-blank line is still there (near-miss headings become exact).
    out = repaired.splitlines()
    out_stripped = {line.strip() for line in out}
    titles = {h.removeprefix("## ").casefold() for h in REQUIRED_HEADINGS}
    for line in original.splitlines():
        if line.strip() and line.strip() not in out_stripped:
            assert line.strip().strip("#*_ ").rstrip(":").strip("*_ ").casefold() in titles, line


# --- fallback -----------------------------------------------------------------------------------------------
def test_fallback_without_previous_summary() -> None:
    text = fallback_summary(None)
    assert text.startswith(f"{D}\n{NO_PRIOR_HISTORY}\n\n{T}\nNone.")
    assert text.endswith(f"{X}\nNone captured.")
    assert check_summary(text, latest_ask=None, identifiers=None).ok


def test_fallback_reuses_a_structured_previous_summary() -> None:
    previous = full(d="Use Postgres.")
    assert fallback_summary(previous) == previous
    assert has_headings_in_order(previous)


def test_fallback_wraps_an_unstructured_or_disordered_previous_summary() -> None:
    disordered = f"{X}\n/a\n\n{D}\nb\n\n{T}\n\n{C}\n\n{P}\n"
    assert not has_headings_in_order(disordered)
    for previous in ("Just prose.", disordered):
        text = fallback_summary(previous)
        assert text.startswith(f"{D}\n{previous.strip()}\n\n{T}\nNone.")
