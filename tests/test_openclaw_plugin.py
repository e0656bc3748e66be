"""compactd as OpenClaw's compaction provider, judged by a real OpenClaw 2026.9.6 gateway.

The plugin (integrations/openclaw/compactd) is loaded from its folder and selected with
``agents.defaults.compaction.provider``; it runs ``python -m compactd summarize --json`` whose summarizer is
the stub, told to drop every identifier. A compaction asked for over RPC must store a summary that carries the
identifiers anyway (compactd repaired them) and the workspace's Red Lines; with the command failing, OpenClaw
must fall back to its own summarizer and still compact. One gateway serves the module.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.llm_server import StubLLMServer
from tests.support.openclaw import (
    BUILTIN_MARKER,
    Gateway,
    OpenClawInstall,
    is_builtin_summary_request,
    is_compactd_request,
    is_summary_request,
)

pytestmark = [pytest.mark.openclaw, pytest.mark.slow]

PLUGIN_DIR = Path(__file__).resolve().parents[1] / "integrations" / "openclaw" / "compactd"
IDENTIFIERS = ("ZX-4411", "/srv/app/billing/ledger.py", "https://wiki.example.com/runbook/zx-4411")
RED_LINE = "Never deploy the billing service on a Friday."
PADDING = "the quick brown fox jumps over the lazy dog and then rests for a while. " * 80


@pytest.fixture(scope="module")
def plugin_gateway(
    openclaw_install: OpenClawInstall, openclaw_llm: StubLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    base = tmp_path_factory.mktemp("openclaw-plugin")
    compactd_config = base / "compactd.yaml"
    gateway = Gateway(openclaw_install, openclaw_llm, base)
    write_compactd_config(compactd_config, openclaw_llm, base / "compactd-state")
    (gateway.workspace / "AGENTS.md").write_text(
        f"# Agent rules\n\n## Red Lines\n\n- {RED_LINE}\n\n## Style\n\n- Be brief.\n", "utf-8"
    )
    gateway.write_config(
        {
            "plugins": {
                "load": {"paths": [str(PLUGIN_DIR)]},
                "allow": ["compactd"],
                "entries": {
                    "compactd": {
                        "enabled": True,
                        "config": {
                            "command": [sys.executable, "-m", "compactd", "summarize", "--json"],
                            "configPath": str(compactd_config),
                            "workspace": str(gateway.workspace),
                        },
                    }
                },
            },
            "agents": {"defaults": {"compaction": {"provider": "compactd"}}},
        }
    )
    gateway.compactd_config = compactd_config  # type: ignore[attr-defined]
    gateway.start()
    try:
        yield gateway
    finally:
        gateway.stop()


def write_compactd_config(path: Path, llm: StubLLMServer, state_dir: Path) -> None:
    config = {
        "state_dir": str(state_dir),
        "summarizer": {
            "base_url": llm.base_url,
            "model": "stub-model",
            "context_tokens": 32768,
            "retry": {"attempts": 1},
        },
    }
    path.write_text(yaml.safe_dump(config), "utf-8")


def grow(gateway: Gateway, key: str) -> None:
    """Four long turns: the first names the identifiers; the cut (3000 tokens kept) summarizes it."""
    gateway.agent(key, f"Ticket {IDENTIFIERS[0]}: fix {IDENTIFIERS[1]}, see {IDENTIFIERS[2]}. {PADDING}")
    for n in range(3):
        gateway.agent(key, f"Step {n}: keep going. {PADDING}")


def compactions(gateway: Gateway, key: str) -> list[dict[str, object]]:
    return [e for e in gateway.session_events(key) if e.get("type") == "compaction"]


# The harness itself (one gateway for the module: a gateway start is most of this file's time): a real 2026.9.6
# gateway runs a turn against the stub model and stores it in its SQLite database.
def test_gateway_runs_a_turn_into_its_database(plugin_gateway: Gateway) -> None:
    answer = plugin_gateway.agent("agent:main:smoke", "Remember the ticket ZX-4411, please.")

    assert isinstance(answer, dict)
    events = plugin_gateway.transcript_events()
    assert events, "the gateway stored no transcript_events rows"
    kinds = [e["event"].get("type") for e in events]
    assert kinds[0] == "session" and events[0]["event"].get("version") == 4
    texts = [
        str(e["event"].get("message", {}).get("content"))
        for e in events
        if e["event"].get("type") == "message"
    ]
    assert any("ZX-4411" in text for text in texts)
    turns = [r for r in plugin_gateway.llm.completions if not is_summary_request(r)]
    assert turns and all(r.streaming for r in turns), "OpenClaw asks the model with stream: true"


def test_plugin_summary_carries_the_identifiers_compactd_repaired(plugin_gateway: Gateway) -> None:
    key = "agent:main:plugin"
    grow(plugin_gateway, key)
    before = len(plugin_gateway.llm.completions)

    answer = plugin_gateway.call("sessions.compact", {"key": key}, timeout=170)

    assert answer.get("compacted") is True, answer
    asked = plugin_gateway.llm.completions[before:]
    assert any(is_compactd_request(r) for r in asked), "compactd's summarizer was never asked"
    assert not any(is_builtin_summary_request(r) for r in asked), "OpenClaw's own summarizer was used"
    stored = compactions(plugin_gateway, key)
    assert len(stored) == 1
    summary = str(stored[0]["summary"])
    for identifier in IDENTIFIERS:  # the stub's summary named none of them
        assert identifier in summary
    assert RED_LINE in summary
    assert BUILTIN_MARKER not in summary


def test_failing_command_falls_back_to_openclaws_summarizer(plugin_gateway: Gateway) -> None:
    key = "agent:main:fallback"
    config_path: Path = plugin_gateway.compactd_config  # type: ignore[attr-defined]
    config_path.write_text("summarizer: [this is not a mapping\n", "utf-8")  # compactd summarize exits 2
    grow(plugin_gateway, key)
    before = len(plugin_gateway.llm.completions)

    answer = plugin_gateway.call("sessions.compact", {"key": key}, timeout=170)

    assert answer.get("compacted") is True, answer
    asked = plugin_gateway.llm.completions[before:]
    assert not any(is_compactd_request(r) for r in asked)
    assert any(is_builtin_summary_request(r) for r in asked)
    stored = compactions(plugin_gateway, key)
    assert len(stored) == 1 and BUILTIN_MARKER in str(stored[0]["summary"])
    assert "compactd summarize gave no summary" in plugin_gateway.log_text()
