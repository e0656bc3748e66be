"""``plan_cut`` finds its cut points and user turns by walks from the nearer end (issue 22: a long branch is not
scanned whole for a cut near its leaf); its plans are those of the whole-branch scans it replaced, kept here as
the reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from compactd.commands.cli import main
from compactd.core.context import rules_of
from compactd.core.tokens import estimate_tokens
from compactd.summarize import cutpoint, engine
from compactd.summarize.cutpoint import (
    CutPlan,
    _budget_cut,
    _is_cut_point,
    _is_turn_start,
    _is_user,
    _shown_by,
    plan_cut,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.corpus import generate_session


def reference_plan_cut(
    path: list[dict[str, Any]],
    *,
    keep_recent_turns: int,
    keep_recent_tokens: int,
    keep_budget_tokens: int | None = None,
) -> CutPlan | None:
    """``plan_cut`` as it was before the walks: every cut point and user turn of the branch listed first."""
    if not path or path[-1].get("type") == "compaction":
        return None
    shown, pi1 = _shown_by(path)
    previous = next((i for i in range(len(path) - 1, -1, -1) if path[i].get("type") == "compaction"), -1)
    start = 0
    if previous >= 0:
        first_kept = path[previous].get("firstKeptEntryId")
        start = next((i for i, e in enumerate(path) if e.get("id") == first_kept), previous + 1)
    end = len(path)
    cut_points = [i for i in range(start, end) if _is_cut_point(path[i])]
    if not cut_points:
        return None
    token_cut = cut_points[0]
    accumulated = 0
    for i in range(end - 1, start - 1, -1):
        entry = path[i]
        if pi1:
            accumulated += sum(estimate_tokens(m, pi1=True) for m in shown(entry))
        elif entry.get("type") != "message" or not isinstance(entry.get("message"), dict):
            continue
        else:
            accumulated += estimate_tokens(entry["message"])
        if accumulated >= keep_recent_tokens:
            token_cut = next((c for c in cut_points if c >= i), cut_points[-1])
            break
    users = [i for i in range(start, end) if _is_user(path[i])]
    turn_cut = (
        users[-keep_recent_turns] if keep_recent_turns and len(users) >= keep_recent_turns else cut_points[0]
    )
    if keep_recent_turns == 0:
        turn_cut = cut_points[-1]
    cut = max(token_cut, turn_cut)
    if keep_budget_tokens is not None and users and keep_recent_turns:
        budget = min(keep_budget_tokens, keep_recent_tokens)
        cut = _budget_cut(path, users, shown, pi1, turns=keep_recent_turns, tokens=budget)
    while cut > start and path[cut - 1].get("type") not in ("compaction", "message"):
        cut -= 1
    turn_start = -1
    if not _is_user(path[cut]):
        turn_start = next((i for i in range(cut, start - 1, -1) if _is_turn_start(path[i])), -1)
    history_end = turn_start if turn_start >= 0 else cut
    if not isinstance(path[cut].get("id"), str):
        return None
    newest = next((i for i in reversed(users) if i >= cut), -1)
    plan = CutPlan(path, start, cut, turn_start, previous, newest)
    plan.to_summarize = [m for e in path[start:history_end] for m in shown(e)]
    if turn_start >= 0:
        plan.turn_prefix = [m for e in path[turn_start:cut] for m in shown(e)]
    plan.kept = [m for e in path[cut:] for m in shown(e)]
    if not plan.to_summarize and not plan.turn_prefix:
        return None
    return plan


_TEXT = st.text(alphabet="ab \n😀", max_size=400)


@st.composite
def branches(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A root → leaf path of every kind of entry a cut reads (messages of each role, summaries, settings,
    compactions keeping from any entry or none, now and then a pi 1.x system message or an id that is not a
    string)."""
    path: list[dict[str, Any]] = []
    for n in range(draw(st.integers(0, 30))):
        kind = draw(
            st.sampled_from(
                [
                    *("user", "user", "assistant", "assistant", "toolResult", "bashExecution", "custom"),
                    *("custom_message", "branch_summary", "compaction", "model_change", "system", "bad"),
                ]
            )
        )
        entry_id: Any = f"e{n}" if kind != "bad" else draw(st.sampled_from([None, 7]))
        entry: dict[str, Any] = {"id": entry_id, "parentId": path[-1]["id"] if path else None}
        if kind in ("user", "assistant", "toolResult", "bashExecution", "custom", "system", "bad"):
            role = "user" if kind == "bad" else kind
            content: Any = [{"type": "text", "text": draw(_TEXT)}]
            if role == "assistant" and draw(st.booleans()):
                content.append({"type": "toolCall", "id": f"c{n}", "name": "bash", "arguments": {"c": "x"}})
            entry.update(type="message", message={"role": role, "content": content, "timestamp": n})
        elif kind == "custom_message":
            entry.update(type="custom_message", customType="ext", content=draw(_TEXT), display=True)
        elif kind == "branch_summary":
            entry.update(type="branch_summary", summary=draw(_TEXT), fromId="x")
        elif kind == "compaction":
            kept = draw(st.sampled_from([None, *(e["id"] for e in path)])) if path else None
            entry.update(type="compaction", summary=draw(_TEXT), firstKeptEntryId=kept, tokensBefore=9)
        else:
            entry.update(type="model_change", provider="p", modelId="m")
        path.append(entry)
    return path


@settings(max_examples=400, deadline=None)
@given(
    branches(),
    st.integers(0, 6),
    st.integers(0, 600),
    st.one_of(st.none(), st.integers(0, 600)),
)
def test_the_cut_is_the_one_the_whole_branch_scans_made(
    path: list[dict[str, Any]], turns: int, tokens: int, budget: int | None
) -> None:
    limits: dict[str, Any] = {"keep_recent_turns": turns, "keep_recent_tokens": tokens}
    assert plan_cut(path, **limits, keep_budget_tokens=budget) == reference_plan_cut(
        path, **limits, keep_budget_tokens=budget
    )


@settings(max_examples=200, deadline=None)
@given(
    branches(),
    st.integers(0, 6),
    st.integers(0, 600),
    st.one_of(st.none(), st.integers(0, 600)),
)
def test_known_rules_give_the_plan_read_off_the_branch(
    path: list[dict[str, Any]], turns: int, tokens: int, budget: int | None
) -> None:
    """A caller whose context was built from the branch passes its rules: the branch is not walked for them
    (``rules_of`` is not called), and the plan is the one read off the branch."""
    limits: dict[str, Any] = {"keep_recent_turns": turns, "keep_recent_tokens": tokens}
    expected = reference_plan_cut(path, **limits, keep_budget_tokens=budget)
    rules = rules_of(path)
    with mock.patch.object(cutpoint, "rules_of", side_effect=AssertionError("the rules were read again")):
        assert plan_cut(path, **limits, keep_budget_tokens=budget, rules=rules) == expected


@pytest.mark.parametrize(("window", "seed"), [(30_000, 7), (60_000, 11)])
def test_inspect_hands_its_context_rules_to_the_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], window: int, seed: int
) -> None:
    """``inspect`` predicts a compaction's route with the rules of the context it built (``predict_route``'s
    ``context``): the same report, and no cut reads the rules off the branch again."""
    path = tmp_path / "session.jsonl"
    generate_session(path, 400_000, seed=seed)
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"agents": {"defaults": {"context_tokens": window}}, "state_dir": str(tmp_path / "state")})
    )
    argv = ["inspect", str(path), "--json", "--config", str(config)]
    with mock.patch.object(engine, "plan_cut", wraps=cutpoint.plan_cut) as cuts:
        assert main(argv) == 0
    expected = capsys.readouterr().out
    assert json.loads(expected)["route"] in ("compact_only", "compact_then_truncate")
    assert cuts.call_count >= 1
    with mock.patch.object(cutpoint, "rules_of", side_effect=AssertionError("the rules were read again")):
        assert main(argv) == 0
    assert capsys.readouterr().out == expected


@settings(max_examples=200, deadline=None)
@given(branches(), st.integers(0, 6), st.integers(0, 600))
def test_what_a_plan_summarizes_is_listed_when_read(
    path: list[dict[str, Any]], turns: int, tokens: int
) -> None:
    """A plan is made (or not) without listing its span: the list is made on its first read, then kept, and
    it is the one the whole-branch scans listed."""
    limits: dict[str, Any] = {"keep_recent_turns": turns, "keep_recent_tokens": tokens}
    expected = reference_plan_cut(path, **limits)
    plan = plan_cut(path, **limits)
    assert (plan is None) == (expected is None)
    if plan is None or expected is None:
        return
    assert callable(plan.__dict__["_to_summarize"])  # not listed yet
    listed = plan.to_summarize
    assert listed == expected.to_summarize and plan.to_summarize is listed
    assert plan == expected


def test_a_plan_made_without_its_lists_has_empty_ones_of_its_own() -> None:
    first, second = CutPlan([], 0, 0, -1, -1), CutPlan([], 0, 0, -1, -1)
    assert first.to_summarize == [] and first.to_summarize is not second.to_summarize
    first.to_summarize.append({"role": "user"})
    assert second.to_summarize == [] and first == CutPlan([], 0, 0, -1, -1, to_summarize=[{"role": "user"}])
