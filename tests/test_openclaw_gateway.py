"""The OpenClaw harness itself: a real 2026.9.6 gateway runs a turn against the stub model and stores it in
its SQLite database (the ground the plugin and the database follower stand on)."""

from __future__ import annotations

import pytest

from tests.support.openclaw import Gateway, is_summary_request

pytestmark = [pytest.mark.openclaw, pytest.mark.slow]


def test_gateway_runs_a_turn_into_its_database(openclaw_gateway: Gateway) -> None:
    answer = openclaw_gateway.agent("agent:main:smoke", "Remember the ticket ZX-4411, please.")

    assert isinstance(answer, dict)
    events = openclaw_gateway.transcript_events()
    assert events, "the gateway stored no transcript_events rows"
    kinds = [e["event"].get("type") for e in events]
    assert kinds[0] == "session" and events[0]["event"].get("version") == 4
    texts = [
        str(e["event"].get("message", {}).get("content"))
        for e in events
        if e["event"].get("type") == "message"
    ]
    assert any("ZX-4411" in text for text in texts)
    turns = [r for r in openclaw_gateway.llm.completions if not is_summary_request(r)]
    assert turns and all(r.streaming for r in turns), "OpenClaw asks the model with stream: true"
