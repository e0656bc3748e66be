"""Where to cut a branch: what is summarized, what is kept verbatim (pi's ``prepareCompaction``/``findCutPoint``).

We keep the last N turns verbatim, but never more than ``keep_recent_tokens``: the later of the two cuts wins.
A toolResult is never a cut point, so a call is never separated from its result; a cut inside a turn makes a
split turn whose prefix is summarized separately, as pi does.

With a keep-recent budget (``keep_budget_tokens``, sized by the job so that the session is left with room to
work) the tail is whole turns instead, newest first, as many as fit the budget (and the two limits above); the
newest turn is always kept whole, even alone over the budget: it is what the agent is working on.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import field
from operator import methodcaller
from typing import Any

from compactd.core.context import entry_to_message, projected_entries, rules_of
from compactd.core.messages import PI_1, role_of
from compactd.core.reader import Entry
from compactd.core.tokens import estimate_tokens
from compactd.datarecord import datarecord

__all__ = ["CutPlan", "plan_cut"]

_CUT_ROLES = ("bashExecution", "custom", "branchSummary", "compactionSummary", "user", "assistant")
_TURN_START_ROLES = ("user", "bashExecution")


Messages = list[dict[str, Any]]


class _Later:
    """A plan's list that may be given as a function of no argument instead, called on its first read (and
    kept): a route prediction only asks whether a plan is made, not what it summarizes (a 42,000-entry branch's
    span is every message of it). Any other reader (the engine, ``==``, ``repr``) reads the list as before."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, plan: Any, owner: type | None = None) -> Any:
        if plan is None:
            return None  # the dataclass's default: an empty list of the plan's own (``__set__``)
        value = plan.__dict__[self.slot]
        if callable(value):
            value = plan.__dict__[self.slot] = value()
        return value

    def __set__(self, plan: Any, value: Messages | Callable[[], Messages] | None) -> None:
        plan.__dict__[self.slot] = [] if value is None else value


@datarecord(rare=True)
class CutPlan:
    """Where a compaction cuts a branch: what is summarized, the split turn's prefix, and what is kept."""

    path: list[Entry]
    boundary_start: int
    first_kept_index: int
    turn_start_index: int
    previous_compaction_index: int
    newest_turn_index: int = -1  # where the newest kept turn starts (its user message), -1 when not known
    to_summarize: _Later = _Later()
    turn_prefix: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)

    @property
    def is_split_turn(self) -> bool:
        return self.turn_start_index >= 0

    @property
    def first_kept_entry_id(self) -> str:
        value = self.path[self.first_kept_index].get("id")
        assert isinstance(value, str)
        return value

    @property
    def previous_compaction(self) -> Entry | None:
        return self.path[self.previous_compaction_index] if self.previous_compaction_index >= 0 else None

    @property
    def previous_summary(self) -> str | None:
        previous = self.previous_compaction
        summary = previous.get("summary") if previous else None
        return summary if isinstance(summary, str) else None

    @property
    def previous_details(self) -> dict[str, Any] | None:
        """The previous compaction's file lists, trusted only when pi (or we) wrote them (``fromHook`` falsy)."""
        previous = self.previous_compaction
        if previous is None or previous.get("fromHook"):
            return None
        details = previous.get("details")
        return details if isinstance(details, dict) else None


def _summary_or_role(entry: Entry, roles: Container[object]) -> bool:
    """A branch summary or custom message, or a message whose role is one of ``roles``."""
    kind = entry.get("type")
    if kind in ("branch_summary", "custom_message"):
        return True
    message = entry.get("message")
    return kind == "message" and isinstance(message, dict) and message.get("role") in roles


def _is_cut_point(entry: Entry) -> bool:
    return _summary_or_role(entry, _CUT_ROLES)


def _is_turn_start(entry: Entry) -> bool:
    return _summary_or_role(entry, _TURN_START_ROLES)


def _is_user(entry: Entry) -> bool:
    message = entry.get("message")
    return entry.get("type") == "message" and isinstance(message, dict) and message.get("role") == "user"


Shown = Callable[[Entry], list[dict[str, Any]]]


def _shown_by(path: list[Entry], rules: str | None = None) -> tuple[Shown, bool]:
    """What each entry of the branch shows the model, by the branch's rules (``rules_of``, unless the caller
    knows them: ``rules``), and whether they are pi 1.x's.

    pi 1.x: the projection's messages (context edits applied, omitted ones gone), system messages left out:
    they are prompt state, which the compaction's checkpoint carries (pi's ``prepareCompaction`` does the same).
    """
    if (rules_of(path) if rules is None else rules) != PI_1:
        return (lambda e: [] if (m := entry_to_message(e)) is None else [m]), False
    shown = {
        id(entry): [m for m in messages if role_of(m) != "system"]
        for entry, messages in projected_entries(path)
        if entry.get("type") != "compaction"
    }
    return (lambda e: shown.get(id(e), [])), True


_TYPE_OF = methodcaller("get", "type")


def _shown_in(entries: list[Entry], shown: Shown, pi1: bool) -> list[dict[str, Any]]:
    """What ``entries`` show the model, in order: under pi 0.73 each entry's own message (``entry_to_message``,
    as ``shown`` gives it), listed without a one-message list and a call of ``shown`` per entry."""
    if pi1:
        return [m for e in entries for m in shown(e)]
    return [m for m in map(entry_to_message, entries) if m is not None]


def _entry_tokens(entry: Entry, shown: Shown, pi1: bool) -> int:
    """What one entry weighs in the context, as pi's token-bounded cut counts it."""
    if pi1:
        return sum(estimate_tokens(m, pi1=True) for m in shown(entry))
    message = entry.get("message")
    if entry.get("type") != "message" or not isinstance(message, dict):
        return 0
    return estimate_tokens(message)


def _budget_cut(
    path: list[Entry],
    users: list[int],
    shown: Shown,
    pi1: bool,
    *,
    turns: int,
    tokens: int,
    weighed: dict[int, int] | None = None,
) -> int:
    """The start of the oldest of the newest whole turns that fit ``tokens`` (at most ``turns`` of them); the
    newest turn's start whatever it weighs. ``weighed``: ``_entry_tokens`` of entries by index, where the
    caller has them (the token-bounded cut's walk weighed the newest entries already)."""
    known = weighed if weighed is not None else {}

    def weight(i: int) -> int:
        value = known.get(i)
        return value if value is not None else _entry_tokens(path[i], shown, pi1)

    cut = users[-1]
    total = sum(map(weight, range(cut, len(path))))
    for n, start in enumerate(reversed(users[:-1]), 2):
        if turns and n > turns:
            break
        total += sum(map(weight, range(start, cut)))
        if total > tokens:
            break
        cut = start
    return cut


def _newest_users(path: list[Entry], start: int, end: int, count: int) -> list[int]:
    """The indexes of the newest ``count`` user messages in ``path[start:end]`` (fewer if it holds fewer),
    oldest first."""
    users: list[int] = []
    for i in range(end - 1, start - 1, -1):
        if _is_user(path[i]):
            users.append(i)
            if len(users) == count:
                break
    users.reverse()
    return users


def plan_cut(
    path: list[Entry],
    *,
    keep_recent_turns: int,
    keep_recent_tokens: int,
    keep_budget_tokens: int | None = None,
    rules: str | None = None,
) -> CutPlan | None:
    """The cut for a root → leaf path, or None when there is nothing to summarize.

    ``keep_budget_tokens``: keep whole turns within min(this, ``keep_recent_tokens``), the newest always.
    ``rules``: the branch's (``rules_of``), when the caller knows them already (its context was built from this
    very branch: ``SessionContext.rules``); else they are read off the branch (a walk of every entry).
    """
    if not path or path[-1].get("type") == "compaction":
        return None
    shown, pi1 = _shown_by(path, rules)
    # The last compaction, found in C-level passes over the types (most branches have none: a walk of every
    # entry in Python, about 17 ms on a 42,000-entry branch, for nothing).
    kinds = list(map(_TYPE_OF, path))
    previous = len(kinds) - 1 - kinds[::-1].index("compaction") if "compaction" in kinds else -1
    start = 0
    if previous >= 0:
        first_kept = path[previous].get("firstKeptEntryId")
        start = next((i for i, e in enumerate(path) if e.get("id") == first_kept), previous + 1)
    end = len(path)
    # Only the first and last cut points, the one after the token cut and the newest user turns are read, each
    # found by a walk from the nearer end: a long branch is not scanned whole for a cut near its leaf.
    first_cut = next((i for i in range(start, end) if _is_cut_point(path[i])), -1)
    if first_cut < 0:
        return None
    last_cut = next(i for i in range(end - 1, start - 1, -1) if _is_cut_point(path[i]))

    # pi's token-bounded cut: walk back over messages until keep_recent_tokens is reached. Each entry's weight
    # (``_entry_tokens``) is kept for the budget's cut, which weighs the newest turns again.
    token_cut = first_cut
    accumulated = 0
    weighed: dict[int, int] = {}
    for i in range(end - 1, start - 1, -1):
        entry = path[i]
        if pi1:
            weighed[i] = weight = sum(estimate_tokens(m, pi1=True) for m in shown(entry))
        elif entry.get("type") != "message" or not isinstance(entry.get("message"), dict):
            continue
        else:
            weighed[i] = weight = estimate_tokens(entry["message"])
        accumulated += weight
        if accumulated >= keep_recent_tokens:
            token_cut = next((c for c in range(i, last_cut) if _is_cut_point(path[c])), last_cut)
            break
    # Turn-bounded cut: the start of the N-th last user turn (0 turns keeps nothing but the latest entries).
    # Of the user turns only the newest N (at least the newest) are ever read.
    users = _newest_users(path, start, end, max(keep_recent_turns, 1))
    turn_cut = (
        users[-keep_recent_turns] if keep_recent_turns and len(users) >= keep_recent_turns else first_cut
    )
    if keep_recent_turns == 0:
        turn_cut = last_cut
    cut = max(token_cut, turn_cut)
    if keep_budget_tokens is not None and users and keep_recent_turns:
        budget = min(keep_budget_tokens, keep_recent_tokens)
        cut = _budget_cut(path, users, shown, pi1, turns=keep_recent_turns, tokens=budget, weighed=weighed)

    while cut > start and path[cut - 1].get("type") not in ("compaction", "message"):
        cut -= 1
    turn_start = -1
    if not _is_user(path[cut]):
        turn_start = next((i for i in range(cut, start - 1, -1) if _is_turn_start(path[i])), -1)
    history_end = turn_start if turn_start >= 0 else cut
    if not isinstance(path[cut].get("id"), str):
        return None  # an unmigrated entry cannot be named by firstKeptEntryId
    newest = users[-1] if users and users[-1] >= cut else -1  # the newest user turn, if it is kept
    plan = CutPlan(path, start, cut, turn_start, previous, newest)
    if turn_start >= 0:
        plan.turn_prefix = _shown_in(path[turn_start:cut], shown, pi1)
    if not plan.turn_prefix and not _shows_any(path, start, history_end, shown, pi1):
        return None
    plan.to_summarize = lambda: _shown_in(path[start:history_end], shown, pi1)  # listed when read
    plan.kept = _shown_in(path[cut:], shown, pi1)
    return plan


def _shows_any(path: list[Entry], start: int, end: int, shown: Shown, pi1: bool) -> bool:
    """Whether ``_shown_in(path[start:end], ...)`` lists anything, told from its first entry that shows a
    message (most often ``path[start]``) instead of listing them all."""
    if pi1:
        return any(shown(path[i]) for i in range(start, end))
    return any(entry_to_message(path[i]) is not None for i in range(start, end))
