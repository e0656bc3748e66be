"""``compactd doctor``'s OpenClaw lines: which agents it found, how it serves each, and the gateway's answer."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from compactd.config import Config
from compactd.sources.openclaw._discovery import discover
from compactd.sources.openclaw._gateway import GatewayError, RpcError, call
from compactd.sources.openclaw._guard import refusal
from compactd.sources.watch import scan_root

PROBE_TIMEOUT_SECONDS = 10.0

Say = Callable[[str], None]
Fix = Callable[[str, str], None]


def check_openclaw(config: Config, env: Mapping[str, str], ok: Say, bad: Fix, warn: Fix) -> int:
    """The OpenClaw install's agents and gateway as compactd serves them; the number of things to fix."""
    if not config.openclaw.enabled:
        ok("openclaw: not followed (openclaw.enabled is false)")
        return 0
    oc = config.openclaw
    install = discover(env, state_dir=oc.state_dir, config_path=oc.config_path)
    problems = 0
    if install.config_error:
        bad(f"openclaw config: {install.config_error}", "fix OpenClaw's config (`openclaw doctor`)")
        problems += 1
    for agent_dir, reason in install.refused:
        bad(
            f"openclaw agent {os.path.basename(agent_dir)}: not followed: {reason} (an agent's database, its "
            "-wal and -shm, its agent/ directory and openclaw.json must be its owner's own, without symlinks)",
            "replace the symlink with the agent's own file, or give the file to the agent directory's owner",
        )
        problems += 1
    if not install.agents and not install.jsonl_agents and not install.refused:
        ok(f"openclaw: no agents under {install.state_dir}")
        return problems
    for agent_dir in install.jsonl_agents:
        ok(
            f"openclaw agent {os.path.basename(agent_dir)}: JSONL transcripts (OpenClaw ≤ 2026.7), served by its "
            f"files under {agent_dir}/sessions"
        )
    for agent in install.agents:
        ok(
            f"openclaw agent {agent.agent_id}: SQLite (OpenClaw 2026.9+), followed read-only in {agent.database}, "
            f"window {agent.context_window:,} ({agent.model or 'default model'}), compacted through the gateway "
            f"at {install.gateway_url}; memories to {agent.workspace}/memory/"
        )
        sessions = os.path.join(agent.agent_dir, "sessions")
        leftovers = scan_root(sessions) if os.path.isdir(sessions) else []
        if leftovers:
            warn(
                f"{len(leftovers)} .jsonl file(s) in {sessions} are ignored: {refusal(leftovers[0])}",
                "`openclaw doctor --fix` imports them; compactd never touches them",
            )
    if not install.agents:
        return problems
    try:
        call(
            install.gateway_url,
            install.token,
            None,
            {},
            timeout=min(PROBE_TIMEOUT_SECONDS, oc.rpc_timeout_seconds),
            owner_uid=install.gateway_uid,
        )
    except GatewayError as exc:
        problems += 1
        if exc.kind == "untrusted":
            bad(
                f"openclaw gateway at {install.gateway_url} is not trusted with the token: {exc}",
                f"compactd sends the token only to a listener owned by the user owning {install.state_dir}; "
                "stop whatever else listens on that port and start the gateway as that user",
            )
        elif exc.kind == "refused":
            bad(
                f"openclaw gateway at {install.gateway_url} refuses compactd: {exc}",
                "give compactd the gateway's token (gateway.auth.token in openclaw.json, or "
                "$OPENCLAW_GATEWAY_TOKEN); compactd backs off until then",
            )
        else:
            bad(
                f"openclaw gateway at {install.gateway_url} is down: {exc}",
                "start it (`openclaw gateway run`); compactd backs off and compacts once it answers",
            )
    except RpcError as exc:  # pragma: no cover - a connect error is a GatewayError
        problems += 1
        bad(f"openclaw gateway at {install.gateway_url}: {exc}", "see the gateway's log")
    else:
        ok(f"openclaw gateway at {install.gateway_url} accepts compactd's token")
    return problems
