"""The real Codex CLI (npm ``@openai/codex@0.169.0``) against the scripted model on 127.0.0.1.

The npm package is a launcher (``bin/codex.js``) that runs the native binary of the optional platform package
npm installs beside it (``@openai/codex-linux-x64``: ``vendor/x86_64-unknown-linux-musl/bin/codex``). It is
installed once into the shared test cache (``codex-0.169.0``) and run through its launcher on Node 24.

:class:`CodexHome` is one ``CODEX_HOME`` in a temp dir whose ``config.toml`` points a custom model provider
(``wire_api = "responses"``) at :class:`tests.support.llm_server.StubLLMServer`; :meth:`CodexHome.exec` runs
``codex exec`` (or ``codex exec resume <id>``) and returns the session id from its output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.cache import cache_dir, install_once, installed_version, npm_install_pinned
from tests.support.node24 import node24_bin, path_with_node24

CODEX_PACKAGE = "@openai/codex"
CODEX_VERSION = "0.169.0"
EXEC_TIMEOUT_SECONDS = 120
_SESSION_ID = re.compile(r"^session id: ([0-9a-f-]{36})$", re.MULTILINE)


def _root() -> Path:
    return cache_dir(f"codex-{CODEX_VERSION}", "COMPACTD_CODEX_DIR")


def _ready(root: Path) -> bool:
    package = root / "node_modules" / CODEX_PACKAGE
    native = root / "node_modules" / "@openai" / "codex-linux-x64" / "vendor"
    return installed_version(package, "bin/codex.js") == CODEX_VERSION and native.is_dir()


_launcher: Path | None = None


def codex_launcher() -> Path:
    """``bin/codex.js`` of the pinned install (installed on first use; safe across pytest processes)."""
    global _launcher
    if _launcher is not None:
        return _launcher
    root = _root()
    path = path_with_node24()
    install_once(
        root,
        lambda: _ready(root),
        lambda: npm_install_pinned(root, "compactd-codex", CODEX_PACKAGE, CODEX_VERSION, path),
    )
    if not _ready(root):
        pytest.fail(f"{root} holds no complete {CODEX_PACKAGE}@{CODEX_VERSION} with its linux-x64 binary")
    _launcher = root / "node_modules" / CODEX_PACKAGE / "bin" / "codex.js"
    return _launcher


@dataclass
class CodexHome:
    """One ``CODEX_HOME`` whose model is the stub at ``base_url``; ``workdir`` is where Codex runs."""

    home: Path
    workdir: Path
    base_url: str
    context_window: int = 40_000
    auto_compact_limit: int = 1_000_000  # Codex's own compaction: off unless a test lowers it
    extra_config: str = ""
    hooks: dict[str, str] = field(default_factory=dict)  # event → shell command

    def write(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = (
            'model = "stub-model"\n'
            'model_provider = "stub"\n'
            f"model_context_window = {self.context_window}\n"
            f"model_auto_compact_token_limit = {self.auto_compact_limit}\n"
            f"{self.extra_config}"
            "[model_providers.stub]\n"
            'name = "stub"\n'
            f'base_url = "{self.base_url}"\n'
            'wire_api = "responses"\n'
        )
        (self.home / "config.toml").write_text(config, "utf-8")
        if self.hooks:
            import json

            doc = {
                "hooks": {
                    event: [{"hooks": [{"type": "command", "command": command}]}]
                    for event, command in self.hooks.items()
                }
            }
            (self.home / "hooks.json").write_text(json.dumps(doc), "utf-8")

    def env(self) -> dict[str, str]:
        return {**os.environ, "CODEX_HOME": str(self.home), "PATH": path_with_node24(), "NO_COLOR": "1"}

    def command(self, prompt: str, *, resume: str | None = None) -> list[str]:
        node = shutil.which("node", path=str(node24_bin())) or "node"
        command = [node, str(codex_launcher()), "exec", "--skip-git-repo-check"]
        if self.hooks:
            command.append("--dangerously-bypass-hook-trust")
        return command + (["resume", resume, prompt] if resume else [prompt])

    def spawn(self, prompt: str, *, resume: str | None = None) -> subprocess.Popen[str]:
        """``codex exec`` started and left running (its output piped)."""
        return subprocess.Popen(
            self.command(prompt, resume=resume),
            cwd=self.workdir,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )

    def finish(self, proc: subprocess.Popen[str]) -> str:
        """Wait for a spawned ``codex exec``; returns the session id."""
        try:
            stdout, stderr = proc.communicate(timeout=EXEC_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            raise AssertionError(
                f"codex exec did not finish in {EXEC_TIMEOUT_SECONDS} s:\n{stderr[-3000:]}"
            ) from None
        if proc.returncode != 0:
            raise AssertionError(
                f"codex exec failed ({proc.returncode}):\n{stdout[-3000:]}\n{stderr[-3000:]}"
            )
        found = _SESSION_ID.search(stderr) or _SESSION_ID.search(stdout)
        if found is None:
            raise AssertionError(f"codex exec printed no session id:\n{stderr[-3000:]}")
        return found.group(1)

    def exec(self, prompt: str, *, resume: str | None = None) -> str:
        """Run one ``codex exec`` turn (resuming ``resume``) to its end; returns the session id."""
        return self.finish(self.spawn(prompt, resume=resume))

    def rollouts(self) -> list[Path]:
        return sorted((self.home / "sessions").rglob("rollout-*.jsonl"))
