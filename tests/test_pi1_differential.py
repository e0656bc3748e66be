"""Differential test against pi 1.6.0 (``@earendil-works/pi-coding-agent``) on files its own SessionManager wrote.

Every session here is written by pi 1.6.0 as its agent writes them (the system prompt and tools recorded as a
system message first), then loaded by pi 1.6.0. For each, compactd reads the branch by pi 1.x's rules (chosen
from what the file holds) and must build the very context pi sends (system messages, context edits applied,
checkpoints before summaries, retain-none compactions, older compactions in the kept range silent), estimate
every message as pi 1.6's ``estimateTokens`` does (images in user messages too), and give the figure pi 1.6's
auto-compaction compares with its threshold (``estimateProjectedContextTokens``: usage recorded before a later
context edit or compaction is not trusted). The ledger's cold read and its incremental fold give the same.
The 0.73.1 scenarios of ``test_differential`` ride along, each with a system message in front.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from compactd.core.context import SessionContext, build_context, context_estimate, rules_of
from compactd.core.jsjson import nesting, stringify
from compactd.core.ledger import SessionLedger
from compactd.core.messages import PI_1
from compactd.core.reader import parse_transcript
from compactd.core.tokens import MAX_TOKENS, estimate_tokens, usage_tokens
from compactd.reading import read_transcript
from compactd.sources.files.tracker import SessionTracker

from tests.support.pi import PI_1_VERSION, Pi, clip_deep
from tests.test_differential import (
    IMAGE,
    PI_SCENARIOS,
    Ops,
    assert_same_messages,
    assistant,
    call,
    canon,
    m,
    short,
    tool_result,
    ts,
    usage,
    user,
)
from tests.test_fuzz_differential import BYTE_OPS, TREE_OPS, mutate_line

Json = dict[str, Any]
TOOLS = [
    {"name": "read", "description": "Read a file", "parameters": {"type": "object", "properties": {}}},
    {"name": "bash", "description": "Run a command", "parameters": {"type": "object", "properties": {}}},
    {"name": "edit", "description": "Edit a file", "parameters": {"type": "object", "properties": {}}},
]


def system(content: str = "", **fields: Any) -> Json:
    return m({"role": "system", "content": content, **fields, "timestamp": ts()})


def prompt() -> Json:
    """What pi 1.x records before its first request: the whole prompt and the tool loadout."""
    return system(
        "You are pi, a coding agent.", sections={"rules": "Be exact.", "cwd": "/w"}, toolsAdded=TOOLS
    )


def edit(target: int, replacement: Json | None) -> Json:
    return {"op": "appendContextEdit", "target": target, "replacement": replacement}


def usage_record() -> Json:
    return {"op": "appendUsage", "kind": "summary", "provider": "stub", "model": "m", "usage": usage(77)}


def scenario_system_patches() -> Ops:
    return [
        prompt(),  # 0
        m(user("start")),  # 1
        m(assistant("ok", total=1500)),  # 2
        system("", sections={"cwd": "/w/sub", "rules": None}, toolsRemoved=[{"name": "edit"}]),  # 3
        m(user("next")),  # 4
        m(assistant("fine", total=2100)),  # 5
        system(
            "An appended instruction.", toolsAdded=[{"name": "web", "description": "w", "parameters": {}}]
        ),
        m(user("a question after the last usage, not answered yet")),
    ]


def scenario_edits() -> Ops:
    return [
        prompt(),  # 0
        m(user("read the log")),  # 1
        m(assistant(call("c1", "read", {"path": "log"}), total=3000, stop="toolUse")),  # 2
        m(tool_result("c1", "line\n" * 800, name="read")),  # 3
        m(assistant("The log is long.", total=4200)),  # 4
        {
            "op": "appendCustomMessageEntry",
            "customType": "ext.note",
            "content": "a note",
            "display": True,
        },  # 5
        m(user("a secret I should not have pasted: hunter2")),  # 6
        m(assistant("Noted.", total=4400)),  # 7
        edit(3, {"content": "[log elided]"}),  # string on a tool result: pi makes it a text block
        edit(6, {"content": "a message the user withdrew"}),  # user: string stays a string
        edit(4, {"content": [{"type": "text", "text": "first"}]}),
        edit(4, {"content": "second: the latest edit wins"}),
        edit(5, None),  # omitted from the context
        m(user("go on")),  # usage after the edits is trusted again
        m(assistant("going on", total=1900)),
        m(user("trailing")),
    ]


def scenario_edit_after_last_usage() -> Ops:
    return [
        prompt(),  # 0
        m(user("q")),  # 1
        m(assistant(call("c1", "bash", {"command": "du"}), total=2500, stop="toolUse")),  # 2
        m(tool_result("c1", "4.0K\t./a\n" * 300)),  # 3
        m(assistant("Sizes listed.", total=9000)),  # 4
        edit(3, {"content": [{"type": "text", "text": "[sizes elided]"}]}),
        edit(1, None),
    ]


def scenario_images_and_usage_records() -> Ops:
    return [
        prompt(),
        m(user([{"type": "text", "text": "what is in this picture?"}, IMAGE])),
        usage_record(),
        m(assistant("A cat.", total=None)),
        m(user([IMAGE, IMAGE])),
        m(assistant(call("c1", "read", {"path": "b.png"}), total=None, stop="toolUse")),
        m(tool_result("c1", "image follows", name="read", more=[IMAGE])),
        usage_record(),
        m(user("and this one?")),
    ]


def scenario_pi_compactions() -> Ops:
    return [
        prompt(),  # 0
        m(user("start the refactor")),  # 1
        m(assistant("Sure.", total=5000)),  # 2
        m(user("read main.ts")),  # 3
        m(assistant(call("c1", "read", {"path": "src/main.ts"}), total=6000, stop="toolUse")),  # 4
        m(tool_result("c1", "export function main() {}\n" * 40, name="read")),  # 5
        m(assistant("It is small.", total=7000)),  # 6
        system("", sections={"mode": "careful"}),  # 7: kept, but system messages before it are dropped
        {
            "op": "appendCompaction",
            "summary": "## Goal\nRefactor",
            "firstKeptEntryId": 3,
            "tokensBefore": 7000,
        },
        m(user("continue")),  # 9
        m(assistant("Continuing.", total=3000)),  # 10
        edit(5, {"content": "[main.ts elided]"}),  # 11: an edit of a kept entry
        # keeps from before the first compaction: the older compaction in the kept range shows nothing
        {"op": "appendCompaction", "summary": "second", "firstKeptEntryId": 6, "tokensBefore": 3500},  # 12
        m(user("after the second compaction")),
        m(assistant("ack", total=2500)),
        m(user("trailing")),
    ]


def scenario_retain_none() -> Ops:
    return [
        prompt(),
        m(user("everything so far")),
        m(assistant("answered", total=8000)),
        {"op": "appendCompaction", "summary": "all of it", "firstKeptEntryId": None, "tokensBefore": 8000},
        m(user("and now?")),
    ]


def scenario_branches() -> Ops:
    return [
        prompt(),  # 0
        m(user("a")),  # 1
        m(assistant("A", total=900)),  # 2
        system("", sections={"experiment": "on"}),  # 3: only on the abandoned branch
        m(user("b")),  # 4
        m(assistant("B", total=1300)),  # 5
        edit(2, None),  # 6
        {"op": "branch", "target": 2},
        m(user("b2 on another branch")),
        m(assistant("B2", total=1250)),
    ]


def with_prompt(ops: Ops) -> Ops:
    """A pi 0.73 scenario as pi 1.x writes it: its system message first (op references shifted by one)."""
    shifted = []
    for op in ops:
        op = dict(op)
        for key in ("target", "firstKeptEntryId"):
            if isinstance(op.get(key), int):
                op[key] += 1
        shifted.append(op)
    return [prompt(), *shifted]


SCENARIOS = {
    "system_patches": scenario_system_patches,
    "edits": scenario_edits,
    "edit_after_last_usage": scenario_edit_after_last_usage,
    "images_and_usage_records": scenario_images_and_usage_records,
    "pi_compactions": scenario_pi_compactions,
    "retain_none": scenario_retain_none,
    "branches": scenario_branches,
    **{f"0.73:{name}": (lambda make=make: with_prompt(make())) for name, make in PI_SCENARIOS.items()},
}


@pytest.fixture(scope="module")
def corpus(pi: Pi, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Json]]:
    root = tmp_path_factory.mktemp("pi1-differential")
    specs = [{"dir": root / name.replace(":", "_"), "ops": make()} for name, make in SCENARIOS.items()]
    written = pi.write_many(specs, version=PI_1_VERSION)
    paths = {name: Path(w["path"]) for name, w in zip(SCENARIOS, written, strict=True)}
    assert all(w["exists"] for w in written)
    loaded = pi.load_many(list(paths.values()), version=PI_1_VERSION)
    return {name: (paths[name], result) for name, result in zip(paths, loaded, strict=True)}


def case(corpus: dict[str, tuple[Path, Json]], name: str) -> tuple[Path, Json]:
    path, theirs = corpus[name]
    assert "error" not in theirs, theirs.get("error")
    assert theirs.get("projected_estimate") is not None, theirs.get("estimate_error")
    return path, theirs


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_context_matches_pi_1(corpus: dict[str, tuple[Path, Json]], name: str) -> None:
    path, theirs = case(corpus, name)
    transcript = read_transcript(path)
    # pi 1.x records its prompt on every branch it sends from; a branch grown from a new root before that
    # (branch_summary's) holds nothing of pi 1.x, and both rule sets read it alike.
    if any(m.get("role") == "system" for m in theirs["messages"]):
        assert rules_of(transcript.branch()) == PI_1
    context = build_context(transcript)
    assert_same_messages(context.messages, theirs["messages"])
    assert context.thinking_level == theirs["thinking_level"]
    assert canon(context.model) == canon(theirs["model"])
    assert [e.get("id") for e in transcript.branch()] == theirs["branch_ids"]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_figure_matches_pi_1(corpus: dict[str, tuple[Path, Json]], name: str) -> None:
    """Each message's estimate, and the figure pi 1.6's auto-compaction compares with its threshold."""
    path, theirs = case(corpus, name)
    transcript = read_transcript(path)
    context = build_context(transcript)
    assert [estimate_tokens(message, pi1=True) for message in context.messages] == theirs["message_tokens"]
    expected = theirs["projected_estimate"]
    ours = context_estimate(context)
    assert (ours.tokens, ours.last_usage_index) == (expected["tokens"], expected["lastUsageIndex"])
    # The ledger (what the daemon keeps per session): cold, exact, and folded line by line as pi appends.
    data = path.read_bytes()
    assert SessionLedger.from_transcript(transcript).tokens == expected["tokens"]
    assert SessionLedger.from_bytes(data).tokens == expected["tokens"]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_tailer_follows_pi_1_appends(
    corpus: dict[str, tuple[Path, Json]], name: str, tmp_path: Path
) -> None:
    """The session followed as pi appends it (in three pieces) gives pi's figure at the end."""
    path, theirs = case(corpus, name)
    data = path.read_bytes()
    follow = tmp_path / path.name
    follow.write_bytes(b"")
    tracker = SessionTracker(str(follow))
    lines = data.splitlines(keepends=True)
    cuts = sorted({0, len(lines) // 3, 2 * len(lines) // 3, len(lines)})
    for start, end in itertools.pairwise(cuts):
        with open(follow, "ab") as handle:
            handle.write(b"".join(lines[start:end]))
        tracker.refresh()
    assert tracker.ledger is not None
    assert tracker.ledger.tokens == theirs["projected_estimate"]["tokens"]


def test_the_corpus_holds_what_pi_1_writes(corpus: dict[str, tuple[Path, Json]]) -> None:
    """The scenarios exercise each rule: an edit pi applied, a checkpoint, a retain-none compaction, an
    untrusted anchor, a user image."""
    kinds: set[str] = set()
    for name in SCENARIOS:
        path, theirs = case(corpus, name)
        lines = read_transcript(path).entries
        kinds.update(e.get("type", "") for e in lines)
        if any(e.get("type") == "compaction" and "systemMessage" in e for e in lines):
            kinds.add("checkpoint")
        if any(e.get("type") == "compaction" and e.get("firstKeptEntryId") == e.get("id") for e in lines):
            kinds.add("retain-none")
        if (
            theirs["estimate"]["lastUsageIndex"] is not None
            and theirs["projected_estimate"]["lastUsageIndex"] is None
        ):
            kinds.add("untrusted anchor")
    assert {"context_edit", "usage", "checkpoint", "retain-none", "untrusted anchor"} <= kinds


# ------------------------------------------------------------------------------------------------------------
# Fuzz: mutants of the sessions pi 1.6.0 wrote, judged by pi 1.6.0 (the mutations of test_fuzz_differential)

FUZZ_SEED = 20_261_202
FUZZ_MUTANTS = 150


def pi1_figure_deviation(context: SessionContext, theirs: Json, problems: set[str]) -> str:
    """ "exact" when our figure is pi 1.6's, else the name of the documented deviation that explains it."""
    expected = theirs.get("projected_estimate")
    if expected is None:
        return "pi's estimate throws"
    tokens = expected["tokens"]
    if not isinstance(tokens, int | float) or isinstance(tokens, bool) or not math.isfinite(tokens):
        return "pi's figure is not a number"
    ours = context_estimate(context)
    if ours.tokens == tokens:
        return "exact"
    index = expected["lastUsageIndex"]
    if index is not None and usage_tokens(theirs["messages"][index]) is None:
        return "pi anchors on a usage that is not a positive count"
    if tokens > MAX_TOKENS:
        assert "figure_overflow" in problems
        return "usage clamped"
    if tokens != int(tokens):
        return "fraction dropped"
    if context.rules != PI_1:
        # The mutation destroyed every pi 1.x marker: the branch reads by 0.73's rules, which count no user image.
        assert any(m.get("role") == "user" and "image" in json.dumps(m) for m in context.messages)
        return "no pi 1.x marker left"
    pytest.fail(f"figures differ: ours {ours.tokens} at {ours.last_usage_index}, pi {tokens} at {index}")


@pytest.mark.slow
def test_mutants_of_pi_1_sessions_read_as_pi_1_reads_them(
    corpus: dict[str, tuple[Path, Json]], pi: Pi, tmp_path: Path
) -> None:
    rng = random.Random(FUZZ_SEED)
    seeds = [corpus[name][0].read_bytes().split(b"\n")[:-1] for name in SCENARIOS]
    mutants: list[tuple[Path, list[str]]] = []
    while len(mutants) < FUZZ_MUTANTS:
        lines = list(rng.choice(seeds))
        ops = []
        for _ in range(rng.choice([1, 1, 2])):
            op = rng.choice(TREE_OPS + BYTE_OPS)
            index = rng.randrange(len(lines))
            lines[index : index + 1] = mutate_line(rng, op, lines[index], rng.choice([150, 1_100]))
            ops.append(op)
        data = b"\n".join(lines) + b"\n"
        if any(p.kind == "parent_cycle" for p in parse_transcript(data).problems):
            continue  # pi loops forever on a parentId cycle
        path = tmp_path / f"{len(mutants):03d}.jsonl"
        path.write_bytes(data)
        mutants.append((path, ops))
    tally: Counter[str] = Counter()
    failures: list[str] = []
    loaded = pi.load_many([p for p, _ in mutants], version=PI_1_VERSION)
    for (path, ops), theirs in zip(mutants, loaded, strict=True):
        try:
            transcript = read_transcript(path)
            context = build_context(transcript)  # never raises
            if "error" in theirs or theirs["wiped"]:
                tally["not loaded"] += 1
                continue
            problems = {p.kind for p in transcript.problems}
            theirs_messages = theirs["messages"]
            if "message_not_object" in problems:  # reported and blocked: pi keeps what we cannot
                tally["message not an object"] += 1
                continue
            assert [canon(clip_deep(m, stringify, nesting)) for m in context.messages] == canon(
                theirs_messages
            )
            for message, tokens in zip(context.messages, theirs.get("message_tokens") or [], strict=False):
                if isinstance(tokens, int):
                    assert estimate_tokens(message, pi1=True) == tokens, short(message)
            tally[pi1_figure_deviation(context, theirs, problems)] += 1
            data = path.read_bytes()
            assert (
                SessionLedger.from_bytes(data).figures()
                == SessionLedger.from_transcript(transcript).figures()
            )
        except Exception as exc:  # every mutant is checked; the report lists each one that failed
            failures.append(f"{path.name} ({', '.join(ops)}): {exc!r}"[:1500])
    assert not failures, f"{len(failures)} mutants failed:\n" + "\n".join(failures[:12])
    loaded_count = FUZZ_MUTANTS - tally["not loaded"]
    assert loaded_count >= 0.6 * FUZZ_MUTANTS, tally
    assert tally["exact"] >= 0.8 * loaded_count, tally
