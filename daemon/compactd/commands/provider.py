"""``compactd summarize --json``: compactd's summary of a span another agent cut (OpenClaw's compaction provider).

OpenClaw 2026.9 chooses the cut, persists and accounts itself, and asks a compaction-provider plugin only for
the summary text of ``{messages, previousSummary, customInstructions}`` (pi message objects). The plugin in
``integrations/openclaw/compactd/`` pipes that JSON here. The span goes through the same engine as a
transcript: it is laid out as a pi branch (header, the previous summary as a compaction entry, the messages,
then one stand-in user message the cut keeps), so the engine's cut puts every given message in the span, and
redaction, ``toolResult.details`` and runtime-context stripping, chunking to the summarizer's window, the
headings, identifier repair and the digest fallback are the ones every compaction uses. The workspace's
critical rules (AGENTS.md) are appended to the text, since OpenClaw stores only the summary.

Bad input is an error (exit 2, a message on stderr, nothing on stdout), so the plugin falls back to OpenClaw's
own summarizer; a failing model is not an error: the digest answers.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from compactd.config import Config
from compactd.core.jsjson import js_int, nesting
from compactd.core.reader import MAX_DEPTH, Transcript, parse_transcript
from compactd.core.timestamps import js_iso
from compactd.datarecord import datarecord
from compactd.summarize.engine import CompactionEngine

__all__ = ["ModelFailed", "RequestError", "SummaryRequest", "parse_request", "read_input", "run_summarize"]

log = logging.getLogger(__name__)

# The stand-in for what follows the span: the cut keeps it, so every given message is summarized.
CONTINUATION_TEXT = "(the conversation continues after this point)"
INPUT_MAX_BYTES = 256 * 1024 * 1024
# The nesting compactd carries in a transcript line (reader.MAX_DEPTH): a message nested deeper would be a
# line pi keeps and compactd refuses to write; every walk of the request stays far from Python's recursion limit.
INPUT_MAX_DEPTH = MAX_DEPTH
_READ_CHUNK = 1024 * 1024


class RequestError(ValueError):
    """The input is not a summary request; nothing was summarized."""


class ModelFailed(Exception):
    """The model failed and ``summarizer.fallback: none`` keeps the digest out: no summary is answered (the
    OpenClaw plugin then lets OpenClaw summarize itself)."""


@datarecord(frozen=True)
class SummaryRequest:
    """What ``compactd provider`` is asked to summarize: the messages, and the previous summary and instructions."""

    messages: list[dict[str, Any]]
    previous_summary: str | None = None
    custom_instructions: str | None = None


def _optional_text(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RequestError(f"{key} must be a string or null, got {type(value).__name__}")
    return value or None


def _rejects_constant(name: str) -> Any:
    raise ValueError(f"JSON.parse rejects {name}")


def read_input(fd: int, limit: int = INPUT_MAX_BYTES) -> bytearray:
    """Everything on ``fd`` up to end of file, reading at most ``limit + 1`` bytes: one byte past the limit is
    refused at once (:class:`RequestError`), never read to the end first."""
    data = bytearray()
    while True:
        chunk = os.read(fd, min(_READ_CHUNK, limit + 1 - len(data)))
        if not chunk:
            return data
        data += chunk
        if len(data) > limit:
            raise RequestError(f"input is larger than {limit} bytes")


def parse_request(data: bytes | bytearray) -> SummaryRequest:
    """The request in ``data``; raises :class:`RequestError` with what is wrong."""
    if not data or data.isspace():
        raise RequestError(
            "no input: expected a JSON object {messages, previousSummary?, customInstructions?}"
        )
    try:
        # As pi's reader takes a line (JSON.parse: no NaN, integers past 64 bits as doubles), by the standard
        # module: a transcript's lone surrogates must not be refused, and orjson would take ten times the input.
        payload = json.loads(data.decode("utf-8"), parse_constant=_rejects_constant, parse_int=js_int)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"input is not JSON: {exc}") from None
    except RecursionError:  # the decoder recurses once a level (jsjson.loads would go on, building them all)
        raise RequestError(f"input nests deeper than {INPUT_MAX_DEPTH} levels") from None
    depth = nesting(payload)
    if depth > INPUT_MAX_DEPTH:
        raise RequestError(f"input nests {depth} levels deep, deeper than {INPUT_MAX_DEPTH}")
    if not isinstance(payload, dict):
        raise RequestError(f"expected a JSON object, got {type(payload).__name__}")
    messages = payload.get("messages")
    if not isinstance(messages, list):
        raise RequestError("messages must be a list of message objects")
    if not messages:
        raise RequestError("messages is empty: nothing to summarize")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or not message["role"]:
            raise RequestError(f"messages[{index}] is not a message object with a role")
    return SummaryRequest(
        messages=messages,
        previous_summary=_optional_text(payload, "previousSummary"),
        custom_instructions=_optional_text(payload, "customInstructions"),
    )


def span_transcript(request: SummaryRequest, *, cwd: str = "/") -> Transcript:
    """The request as a pi branch whose cut (keeping nothing but the stand-in) summarizes every message.

    The branch's lines are parsed as a transcript's are, each message and the previous summary a stand-in; the
    request's values (parsed as pi's reader parses a line) then take their places. Serialising and parsing them
    again would cost a copy of each and orjson's ten times the largest one, for the same values."""
    ids = [f"{index + 1:08x}" for index in range(len(request.messages) + 2)]
    lines = (json.dumps(e, ensure_ascii=True).encode() for e in _span_entries(request, ids, js_iso(), cwd))
    transcript = parse_transcript(b"\n".join(lines) + b"\n", check=False)
    messages = dict(zip(ids, request.messages, strict=False))
    for entry in transcript.entries:
        message = messages.get(entry["id"])
        if message is not None:
            entry["message"] = message
        elif entry["type"] == "compaction":
            entry["summary"] = request.previous_summary
    return transcript


def _span_entries(request: SummaryRequest, ids: list[str], stamp: str, cwd: str) -> Iterator[dict[str, Any]]:
    """The header, the previous summary, a stand-in entry per message (``ids[i]``), the continuation: one at a
    time, as they are serialised."""
    yield {"type": "session", "version": 3, "id": "compactd-provider", "timestamp": stamp, "cwd": cwd}
    parent: str | None = None
    if request.previous_summary:
        yield {
            "type": "compaction",
            "id": ids[-2],
            "parentId": None,
            "timestamp": stamp,
            "summary": "",  # in its place once parsed, as the messages
            "firstKeptEntryId": ids[0],
            "tokensBefore": 0,
        }
        parent = ids[-2]
    for entry_id in ids[: len(request.messages)]:
        yield {"type": "message", "id": entry_id, "parentId": parent, "timestamp": stamp, "message": {}}
        parent = entry_id
    continuation = {"role": "user", "content": CONTINUATION_TEXT, "timestamp": 0}
    yield {"type": "message", "id": ids[-1], "parentId": parent, "timestamp": stamp, "message": continuation}


async def summarize_request(
    request: SummaryRequest, config: Config, *, client: Any, agents_md: str | None = None
) -> dict[str, Any]:
    """``{"summary", "level"}``: the engine's summary of the request's span, with the rules appended."""
    from compactd.summarize.settings import engine_settings

    settings = replace(
        engine_settings(config),
        keep_recent_turns=0,  # OpenClaw appends its own verbatim recent turns after the returned text
        keep_recent_tokens=0,
        custom_instructions=request.custom_instructions,
    )
    if agents_md:  # room for the rules under the same cap as the whole summary
        settings = replace(
            settings,
            summary_max_chars=max(1_000, settings.summary_max_chars - settings.post_compaction_max_chars - 2),
        )
    engine = CompactionEngine(settings, client)
    result = await engine.compact(span_transcript(request), agents_md=agents_md)
    if result is None:
        raise RequestError("nothing to summarize in messages")
    if result.model_error is not None:
        if config.summarizer.fallback == "none":
            raise ModelFailed(f"the summarizer failed ({result.model_error}); summarizer.fallback: none")
        log.warning(
            "the summarizer failed (%s): answering the digest instead (summarizer.fallback: digest)",
            result.model_error,
        )
    summary = result.summary
    if result.post_message is not None and isinstance(result.post_message.get("content"), str):
        summary = summary.rstrip() + "\n\n" + result.post_message["content"]
    return {"summary": summary, "level": result.level}


def _workspace_path(config: Config, workspace: str | None, agent: str) -> Path | None:
    """``--workspace``, else the compactd config's workspace for the OpenClaw agent (its sessions dir under
    ``$OPENCLAW_STATE_DIR``, as for the agent's files)."""
    if workspace:
        return Path(workspace).expanduser()
    state = Path(os.environ.get("OPENCLAW_STATE_DIR") or Path.home() / ".openclaw")
    return config.agents.workspace_for(
        state / "agents" / agent / "sessions" / "session.jsonl", agent_id=agent
    )


def dump_answer(answer: dict[str, Any]) -> str:
    try:
        return orjson.dumps(answer).decode()
    except TypeError:  # lone surrogates: JSON carries them escaped
        return json.dumps(answer, ensure_ascii=True)


def run_summarize(
    config: Config, request: SummaryRequest, *, workspace: str | None = None, agent: str = "main"
) -> str:
    """The JSON answer to ``request`` (:func:`parse_request` of :func:`read_input`: the input's bytes are gone
    by the time the engine runs)."""
    import anyio

    from compactd.summarize.settings import make_client
    from compactd.workspace import configured_workspace, read_agents_md

    path = _workspace_path(config, workspace, agent)
    rules = read_agents_md(configured_workspace(path)) if path is not None else None

    async def go() -> dict[str, Any]:
        client = make_client(config)
        try:
            return await summarize_request(request, config, client=client, agents_md=rules)
        finally:
            if client is not None:
                await client.close()

    answer = anyio.run(go)
    log.info("summarized %d messages at level %s", len(request.messages), answer["level"])
    return dump_answer(answer)
