"""The plugin's module under node alone (no gateway): what ``summarize`` returns for each way the command ends.

A fake ``api`` records the provider; the command is a small Python script standing in for compactd, so each
test is about the plugin's handling: the summary returned, or nothing (OpenClaw's fallback) on a failure, bad
JSON or an abort, with the child killed on abort.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PLUGIN = Path(__file__).resolve().parents[1] / "integrations" / "openclaw" / "compactd" / "index.js"

DRIVER = """
const plugin = (await import(process.env.PLUGIN)).default;
const cfg = JSON.parse(process.env.CFG);
let provider;
const warnings = [];
plugin.register({ pluginConfig: cfg, logger: { warn: (m) => warnings.push(m) },
  registerCompactionProvider: (p) => { provider = p; } });
const controller = new AbortController();
const abortWhen = process.env.ABORT_WHEN_FILE;  // abort once the command has started (it writes this file)
const { existsSync } = await import("node:fs");
const poll = abortWhen ? setInterval(() => { if (existsSync(abortWhen)) { clearInterval(poll); controller.abort(); } }, 20) : null;
const started = Date.now();
const summary = await provider.summarize({ messages: [{ role: "user", content: "hi" }], previousSummary: "prev",
  customInstructions: "ci", signal: controller.signal });
console.log(JSON.stringify({ id: provider.id, plugin: plugin.id, summary: summary ?? null, warnings,
  ms: Date.now() - started }));
"""


def run_plugin(script: str, tmp_path: Path, *, abort_when: Path | None = None) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH")
    fake = tmp_path / "fake.py"
    fake.write_text(script, "utf-8")
    config = {"command": [sys.executable, str(fake)], "configPath": str(tmp_path / "c.yaml")}
    env = {
        "PLUGIN": PLUGIN.as_uri(),
        "CFG": json.dumps(config),
        "ABORT_WHEN_FILE": str(abort_when or ""),
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [node, "--input-type=module", "-e", DRIVER],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_commands_summary_is_returned_and_gets_the_request(tmp_path: Path) -> None:
    script = (
        "import json, sys\n"
        "request = json.load(sys.stdin)\n"
        "assert sys.argv[1:] == ['--config', sys.argv[2]]\n"
        "print(json.dumps({'summary': 'S:' + request['previousSummary'] + request['customInstructions']"
        " + request['messages'][0]['content']}))\n"
    )
    result = run_plugin(script, tmp_path)
    assert result["id"] == "compactd" and result["plugin"] == "compactd"
    assert result["summary"] == "S:prevcihi"
    assert result["warnings"] == []


@pytest.mark.parametrize(
    "script",
    [
        "import sys; sys.stdin.read(); sys.stderr.write('bad input'); sys.exit(2)",
        "import sys; sys.stdin.read(); print('not json')",
        "import sys, json; sys.stdin.read(); print(json.dumps({'summary': '   '}))",
    ],
    ids=["exit-2", "bad-json", "empty"],
)
def test_a_failing_command_returns_nothing(tmp_path: Path, script: str) -> None:
    result = run_plugin(script, tmp_path)
    assert result["summary"] is None
    assert any("OpenClaw's own summarizer is used" in w for w in result["warnings"])


def test_an_abort_kills_the_command_and_returns_nothing(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = (
        f"import os, time\nwith open({str(pid_file) + '.tmp'!r}, 'w') as f: f.write(str(os.getpid()))\n"
        f"os.replace({str(pid_file) + '.tmp'!r}, {str(pid_file)!r})\ntime.sleep(60)\n"
    )
    result = run_plugin(script, tmp_path, abort_when=pid_file)
    assert result["summary"] is None and result["ms"] < 20_000
    assert any("aborted" in w for w in result["warnings"])
    pid = int(pid_file.read_text())
    status = Path(f"/proc/{pid}/status")
    assert not status.exists() or "zombie" in status.read_text()
