"""Seeded pi v3 coding-agent sessions with an answer key (issue 18, after ``pi-openai-server-compaction``).

Five categories of facts, each answer tied to what it belongs to (its *subject*):

- ``exact``: ports, config paths, checksums, owners, parameter values, incident codes of services;
- ``relational``: dependency and routing edges, regions, who reports to whom, where a secret lives;
- ``tool``: the exact output of an earlier read, test run, query, deploy or probe (only in the tool result);
- ``correction``: a value stated, then explicitly corrected later (the answer is the final one);
- ``task``: each task's latest state (queued / in progress / blocked / verifying / done), its blocker and its
  next action, after the state changed over the session.

Facts sit in turns spread over early, middle and late history, between turns of filler work (tool output of
code and logs); the newest turns (the tail) hold no answer, so only the summary can carry them. Output depends
only on the seed and the size.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from bench.corpus import EPOCH_MS, WORDS, code_line

CATEGORIES = ("exact", "relational", "tool", "correction", "task")
PHASES = ("early", "middle", "late")
CHARS_PER_TOKEN = 4
PROVIDER, MODEL_ID, API = "anthropic", "claude-sonnet-4-5", "anthropic-messages"
TAIL_TURNS = 4
STATES = ("queued", "in progress", "blocked", "verifying", "done")

SERVICES = (
    "billing-api",
    "ledger-sync",
    "auth-gateway",
    "search-indexer",
    "mailer-svc",
    "report-worker",
    "edge-proxy",
    "quota-svc",
    "geo-cache",
    "audit-log",
    "invoice-render",
    "webhook-relay",
)
PEOPLE = (
    "@pnair",
    "@okafor",
    "@lindqvist",
    "@tanaka",
    "@moreau",
    "@kowalski",
    "@haddad",
    "@obrien",
    "@ferreira",
    "@nguyen",
    "@schmidt",
    "@abara",
)
REGIONS = ("eu-west-2", "us-east-1", "ap-south-1", "eu-central-1", "us-west-2", "sa-east-1", "ap-northeast-3")
PARAMS = ("max_conns", "batch_size", "timeout_ms", "retry_limit", "pool_size", "queue_depth")
TABLES = ("orders_eu", "payments_q3", "refunds_open", "sessions_stale", "invoices_draft", "users_locked")
TEST_FILES = ("test_ledger.py", "test_refunds.py", "test_auth_flow.py", "test_webhooks.py", "test_quota.py")
TASK_TITLES = (
    "migrate the invoices schema",
    "rotate the webhook signing keys",
    "backfill missing refunds",
    "split the search index by tenant",
    "move the mailer to the new queue",
    "drop the legacy auth tokens",
)
SCRIPTS = (
    "scripts/migrate_dry_run.sh",
    "scripts/backfill_refunds.py",
    "scripts/rotate_keys.sh",
    "scripts/reindex_tenant.py",
    "scripts/drain_queue.py",
    "scripts/purge_tokens.py",
    "scripts/verify_counts.py",
    "scripts/canary_check.sh",
    "scripts/replay_events.py",
    "scripts/compare_totals.py",
)


@dataclass(frozen=True)
class Answer:
    """One question and the only reading that counts: ``value`` in a unit of text with every ``subject`` term,
    and no ``stale`` value presented as current beside the subject."""

    category: str
    question: str
    subject: tuple[str, ...]
    value: str
    stale: tuple[str, ...] = ()
    phase: str = "early"


@dataclass
class Session:
    """A generated session: its turns (lists of pi messages, oldest first) and the answer key."""

    seed: int
    session_id: str
    turns: list[list[dict[str, Any]]]
    answers: list[Answer]
    body_turns: int  # turns before the answer-free tail

    def messages(self, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        return [m for turn in self.turns[start:stop] for m in turn]

    def split_points(self, parts: int) -> list[int]:
        """Turn indexes cutting the session into ``parts`` growing pieces (the tail stays in the last one)."""
        return [self.body_turns * k // parts for k in range(1, parts)] + [len(self.turns)]


@dataclass
class _Event:
    """A fact stated in one turn: who says it, the text, and for tool facts the call and its output."""

    speaker: str  # "user" | "assistant" | "tool"
    text: str
    command: str = ""
    answers: list[Answer] = field(default_factory=list)


class _Ids:
    """Entry ids, 8 characters: a prefix (a grown session's, so they never meet the first ids) and a count."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"{self.prefix}{self.n:0{8 - len(self.prefix)}x}"


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _filler(rng: random.Random, chars: int) -> str:
    lines: list[str] = []
    size = 0
    while size < chars:
        line = code_line(rng)
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def _facts(rng: random.Random) -> list[list[_Event]]:
    """Chains of events: one chain per fact (a correction or a task is a chain of several, in order)."""
    services = rng.sample(SERVICES, 8)
    people = rng.sample(PEOPLE, 8)
    # One (service, parameter) pair per fact: the tool read takes timeout_ms, the others one parameter each.
    params = rng.sample([p for p in PARAMS if p != "timeout_ms"], 4)
    chains: list[list[_Event]] = []

    def single(
        category: str, speaker: str, text: str, question: str, subject: tuple[str, ...], value: str
    ) -> None:
        chains.append([_Event(speaker, text, answers=[Answer(category, question, subject, value)])])

    # exact recall
    for svc in services[:3]:
        port = str(rng.randrange(7000, 9999))
        said = rng.choice(
            (
                f"FYI {svc} listens on port {port} in staging.",
                f"In staging, {svc} serves on port {port}.",
                f"{svc} is bound to port {port} on the staging hosts.",
            )
        )
        single("exact", "user", said, f"port of {svc}", (svc,), port)
    path = f"/srv/conf/{_hex(rng, 4)}/limits.toml"
    single(
        "exact",
        "assistant",
        f"The config for {services[3]} is read from {path}.",
        f"config of {services[3]}",
        (services[3],),
        path,
    )
    artifact = f"{services[4]}-2.{rng.randrange(10, 40)}.{rng.randrange(10)}.tar.gz"
    checksum = _hex(rng, 16)
    single(
        "exact",
        "assistant",
        f"Checksum of {artifact}: sha256 {checksum}.",
        f"checksum of {artifact}",
        (artifact,),
        checksum,
    )
    single(
        "exact",
        "user",
        f"The on-call owner of {services[5]} is {people[0]}.",
        f"owner of {services[5]}",
        (services[5],),
        people[0],
    )
    param, value = params[0], str(rng.randrange(16, 5000))
    single(
        "exact",
        "user",
        f"Keep {param} for {services[6]} at {value}.",
        f"{param} of {services[6]}",
        (services[6], param),
        value,
    )
    code = f"INC-{rng.randrange(1000, 9999)}"
    single(
        "exact",
        "assistant",
        f"I opened {code} for the {services[7]} outage.",
        f"incident of {services[7]}",
        (services[7],),
        code,
    )

    # relational state
    a, b = services[0], services[4]
    single(
        "relational",
        "user",
        f"Note that {a} depends on {b} for every write.",
        f"what {a} depends on",
        (a, "depend"),
        b,
    )
    route = f"/v{rng.randrange(2, 5)}/{rng.choice(('invoices', 'refunds', 'exports', 'tenants'))}"
    single(
        "relational",
        "assistant",
        f"Requests to {route} are routed to {services[2]}.",
        f"route {route}",
        (route,),
        services[2],
    )
    region = rng.choice(REGIONS)
    single(
        "relational",
        "user",
        f"{services[3]} runs in {region} only.",
        f"region of {services[3]}",
        (services[3],),
        region,
    )
    single(
        "relational",
        "user",
        f"{people[1]} reports to {people[2]} now.",
        f"who {people[1]} reports to",
        (people[1], "report"),
        people[2],
    )
    secret = f"vault:kv/prod/{_hex(rng, 6)}/db-password"
    single(
        "relational",
        "assistant",
        f"The database password of {services[1]} lives in {secret}.",
        f"secret of {services[1]}",
        (services[1],),
        secret,
    )

    # tool history: the value is only in the tool result
    tables = rng.sample(TABLES, 2)
    tests = rng.sample(TEST_FILES, 2)

    def tool(command: str, output: str, question: str, subject: tuple[str, ...], value: str) -> None:
        chains.append([_Event("tool", output, command, [Answer("tool", question, subject, value)])])

    timeout = str(rng.randrange(100, 9000))
    tool(
        f"cat /etc/{services[2]}/env",
        f"{services[2]} timeout_ms={timeout}\n{services[2]} log_level=info",
        f"timeout_ms read for {services[2]}",
        (services[2], "timeout_ms"),
        timeout,
    )
    failed = rng.randrange(2, 9)
    tool(
        f"pytest tests/{tests[0]} -q",
        f"{tests[0]}: {failed} failed, {rng.randrange(40, 200)} passed in 3.2s",
        f"failures in {tests[0]}",
        (tests[0],),
        f"{failed} failed",
    )
    rows = str(rng.randrange(1000, 99999))
    tool(
        f"psql -c 'select count(*) from {tables[0]}'",
        f"{tables[0]} count: {rows}",
        f"row count of {tables[0]}",
        (tables[0],),
        rows,
    )
    build = _hex(rng, 7)
    tool(
        f"./deploy.sh {services[5]} --canary",
        f"{services[5]} deployed build {build} to canary",
        f"build deployed for {services[5]}",
        (services[5],),
        build,
    )
    status = rng.choice(("502", "503", "504", "429"))
    tool(
        f"curl -si https://{services[6]}.internal/healthz",
        f"{services[6]} healthz: HTTP {status} after {rng.randrange(200, 2000)} ms",
        f"health of {services[6]}",
        (services[6],),
        status,
    )

    # corrections: stated, then corrected (1-2 later turns)
    for svc, param in zip(services[1:4], params[1:], strict=True):
        old, new = rng.sample(range(8, 4000), 2)
        question = f"{param} of {svc} (corrected)"
        first = _Event("user", f"Set {param} on {svc} to {old}.")
        fix = rng.choice(
            (
                f"Correction: {param} on {svc} must be {new}, not {old}.",
                f"Sorry, I was wrong earlier: {svc} needs {param} = {new} (the {old} I gave is superseded).",
                f"Correction: {param} on {svc} must be {new}.",  # the old value left unsaid
                f"Actually, use {param} {new} for {svc} instead.",
            )
        )
        last = _Event(
            "user", fix, answers=[Answer("correction", question, (svc, param), str(new), (str(old),))]
        )
        chains.append([first, last])
    port_svc = services[7]
    old_port, new_port = rng.sample(range(7000, 9999), 2)
    chains.append(
        [
            _Event("assistant", f"{port_svc} is reachable on port {old_port}."),
            _Event(
                "user",
                f"No, {port_svc} moved to port {new_port} last week; {old_port} is the old one.",
                answers=[
                    Answer(
                        "correction",
                        f"port of {port_svc} (corrected)",
                        (port_svc, "port"),
                        str(new_port),
                        (str(old_port),),
                    )
                ],
            ),
        ]
    )

    # tasks: states change over time; the answers are the latest state, its blocker, the next action
    for n, title in enumerate(rng.sample(TASK_TITLES, 4)):
        task = f"TASK-{rng.randrange(100, 999)}{n}"
        final = ("done", "blocked", "in progress", "verifying")[n]
        path_states = {
            "done": ["queued", "in progress", "verifying", "done"],
            "blocked": ["queued", "in progress", "blocked"],
            "in progress": ["queued", "blocked", "in progress"],
            "verifying": ["in progress", "verifying"],
        }[final]
        scripts = rng.sample(SCRIPTS, len(path_states))
        events: list[_Event] = []
        for k, state in enumerate(path_states):
            blocker = f"SEC-{rng.randrange(1000, 9999)}"
            why = f", blocked on {blocker} review" if state == "blocked" else ""
            update = rng.choice(
                (
                    f"Update on {task}: now {state}{why}; next action: {scripts[k]}.",
                    f"{task} is {state} now{why}. Next action: {scripts[k]}.",  # the action in its own sentence
                    f"Status of {task}: {state}{why} (next action: {scripts[k]}).",
                )
            )
            text = f"{task} ({title}) is {state}{why}; next action: {scripts[k]}." if k == 0 else update
            speaker = "assistant" if k % 2 else "user"
            answers: list[Answer] = []
            if k == len(path_states) - 1:
                earlier = tuple(s for s in dict.fromkeys(path_states[:-1]) if s != state)
                answers = [
                    Answer("task", f"state of {task}", (task,), state, earlier),
                    Answer("task", f"next action of {task}", (task,), scripts[k], tuple(scripts[:k])),
                ]
                if state == "blocked":
                    answers.append(Answer("task", f"blocker of {task}", (task,), blocker))
            events.append(_Event(speaker, text, answers=answers))
        chains.append(events)
    return chains


def _place(rng: random.Random, chains: list[list[_Event]], body: int) -> list[list[_Event]]:
    """Events per turn: single facts round-robin over the thirds, chains in order across the body."""
    slots: list[list[_Event]] = [[] for _ in range(body)]
    third = body // 3
    singles = [c for c in chains if len(c) == 1]
    rng.shuffle(singles)
    for n, chain in enumerate(singles):
        phase = n % 3
        slots[rng.randrange(phase * third, (phase + 1) * third if phase < 2 else body)].append(chain[0])
    for chain in (c for c in chains if len(c) > 1):
        positions = sorted(rng.sample(range(body), len(chain)))
        for position, event in zip(positions, chain, strict=True):
            slots[position].append(event)
    return slots


def _phase(index: int, body: int) -> str:
    return PHASES[min(2, index * 3 // body)]


def generate(seed: int, tokens: int = 35_000, body_turns: int = 36) -> Session:
    """A session of about ``tokens`` tokens (chars / 4): ``body_turns`` turns of facts and work, then the tail."""
    rng = random.Random(seed)
    chains = _facts(rng)
    slots = _place(rng, chains, body_turns)
    fact_chars = sum(len(e.text) + 200 for chain in chains for e in chain)
    tail_chars = TAIL_TURNS * 1_200
    per_turn = max(200, (tokens * CHARS_PER_TOKEN - fact_chars - tail_chars) // body_turns)
    ms = EPOCH_MS + seed * 10_000_000
    call_n = 0
    turns: list[list[dict[str, Any]]] = []
    answers: list[Answer] = []

    def stamp() -> int:
        nonlocal ms
        ms += rng.randrange(2_000, 40_000)
        return ms

    def call(command: str) -> tuple[str, dict[str, Any]]:
        nonlocal call_n
        call_n += 1
        call_id = f"toolu_{seed:04d}{call_n:05d}"
        block = {"type": "toolCall", "id": call_id, "name": "bash", "arguments": {"command": command}}
        return call_id, block

    for index, events in enumerate(slots):
        for event in events:
            answers.extend(
                Answer(a.category, a.question, a.subject, a.value, a.stale, _phase(index, body_turns))
                for a in event.answers
            )
        said_by_user = [e.text for e in events if e.speaker == "user"]
        said_by_agent = [e.text for e in events if e.speaker == "assistant"]
        tools = [e for e in events if e.speaker == "tool"]
        topic = " ".join(rng.choices(WORDS, k=6))
        ask = " ".join([*said_by_user, f"Next, please look at the {topic} part."])
        turn = [_user(ask, stamp())]
        for event in tools:
            call_id, block = call(event.command)
            turn.append(_assistant([_text("Let me check."), block], stamp(), "toolUse"))
            turn.append(_tool_result(call_id, event.text, stamp()))
        path = f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py"
        call_id, block = call(f"sed -n 1,200p {path}")
        turn.append(_assistant([_text(f"Reading {path}."), block], stamp(), "toolUse"))
        turn.append(_tool_result(call_id, _filler(rng, per_turn), stamp()))
        reply = " ".join([*said_by_agent, "Looked at it; " + " ".join(rng.choices(WORDS, k=14)) + "."])
        turn.append(_assistant([_text(reply)], stamp(), "stop"))
        turns.append(turn)
    for n in range(TAIL_TURNS):
        chore = (
            "reformat the README table",
            "rename the CI job",
            "fix the typo in CONTRIBUTING.md",
            "sort the imports in the utils module",
        )[n]
        call_id, block = call("git diff --stat")
        turns.append(
            [
                _user(f"Small thing: {chore}.", stamp()),
                _assistant([_text("On it."), block], stamp(), "toolUse"),
                _tool_result(call_id, _filler(rng, 600), stamp()),
                _assistant([_text(f"Done: {chore}.")], stamp(), "stop"),
            ]
        )
    session_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return Session(seed, session_id, turns, answers, body_turns)


def _text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def _user(value: str, ms: int) -> dict[str, Any]:
    return {"role": "user", "content": [_text(value)], "timestamp": ms}


def _assistant(content: list[dict[str, Any]], ms: int, stop: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "api": API,
        "provider": PROVIDER,
        "model": MODEL_ID,
        "stopReason": stop,
        "timestamp": ms,
    }


def _tool_result(call_id: str, output: str, ms: int) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "bash",
        "content": [_text(output)],
        "isError": False,
        "timestamp": ms,
    }


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def entry_lines(
    messages: list[dict[str, Any]], parent: str | None, ids: _Ids | None = None
) -> tuple[bytes, str | None]:
    """pi ``message`` entries on one ``parentId`` chain below ``parent``; the bytes and the new leaf id."""
    ids = ids or _Ids()
    out: list[bytes] = []
    for message in messages:
        entry_id = f"{ids()}"
        entry = {
            "type": "message",
            "id": entry_id,
            "parentId": parent,
            "timestamp": _iso(message["timestamp"]),
            "message": message,
        }
        out.append(orjson.dumps(entry) + b"\n")
        parent = entry_id
    return b"".join(out), parent


def session_bytes(session: Session, stop: int | None = None) -> bytes:
    """The pi v3 JSONL of the session's first ``stop`` turns (all by default): header, model change, messages."""
    ids = _Ids()
    first_ms = session.turns[0][0]["timestamp"]
    header = {
        "type": "session",
        "version": 3,
        "id": session.session_id,
        "timestamp": _iso(first_ms - 1000),
        "cwd": "/nonexistent/quality-bench",
    }
    model_id = ids()
    change = {
        "type": "model_change",
        "id": model_id,
        "parentId": None,
        "timestamp": _iso(first_ms - 500),
        "provider": PROVIDER,
        "modelId": MODEL_ID,
    }
    body, _ = entry_lines(session.messages(0, stop), model_id, ids)
    return orjson.dumps(header) + b"\n" + orjson.dumps(change) + b"\n" + body


def append_bytes(session: Session, start: int, stop: int, leaf: str, id_prefix: str) -> bytes:
    """Turns ``start:stop`` as entries below ``leaf`` (a grown session after a compaction), ids ``id_prefix``…."""
    counter = _Ids()

    def ids() -> str:
        return f"{id_prefix}{counter()[len(id_prefix) :]}"

    body, _ = entry_lines(session.messages(start, stop), leaf, ids)  # type: ignore[arg-type]
    return body
