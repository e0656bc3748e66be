"""Installing as the README says: its per-user service steps followed in a fresh HOME, then the unit's
``ExecStart`` run with the unit's own environment (what the user manager does), and the wheel carrying
everything the daemon needs, the OpenClaw plugin included (issue 20, item 1)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from compactd import __version__

REPO = Path(__file__).resolve().parent.parent
PLUGIN_FILES = ("index.js", "openclaw.plugin.json", "package.json")
# What the steps may not run here: the service manager itself (no systemd in a test's sandbox).
MANAGER_COMMANDS = ("systemctl", "loginctl", "journalctl", "sudo")


def readme_service_steps() -> list[str]:
    """The commands of the README's per-user block under "Running as a service", in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Running as a service\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(# per user.*?)```", section, re.S)
    assert block is not None, "the README's per-user service block"
    steps = []
    for line in block.group(1).splitlines():
        command = line.split("  #", 1)[0].strip()
        if command and not command.startswith("#"):
            steps.append(command)
    return steps


def fresh_clone(tmp: Path) -> Path:
    """The clone as a new operator has it: the tracked files, none of this checkout's build leftovers."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    clone = tmp / "clone"
    for name in filter(None, listed):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            target = clone / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return clone


def unit_directives(path: Path, home: Path) -> tuple[list[str], dict[str, str]]:
    """The unit's ExecStart argv and its Environment= pairs, with %h expanded as the user manager does."""
    argv: list[str] = []
    env: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip().replace("%h", str(home))
        if line.startswith("ExecStart="):
            argv = shlex.split(line.removeprefix("ExecStart="))
        elif line.startswith("Environment="):
            for pair in shlex.split(line.removeprefix("Environment=")):
                key, _, value = pair.partition("=")
                env[key] = value
    return argv, env


@pytest.mark.slow
def test_readme_service_steps_in_a_fresh_home_give_a_unit_that_starts_compactd(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    # A new operator's shell: their HOME, the system's PATH, pip's own index settings (CI reaches PyPI).
    shell_env = {
        "HOME": str(home),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        **{k: v for k, v in os.environ.items() if k.startswith("PIP_")},
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    python = Path(sys.base_prefix) / "bin" / "python3"
    shell_env["PATH"] = f"{python.parent}:{shell_env['PATH']}"  # the python3 that built this suite's venv
    ran = []
    for step in readme_service_steps():
        if step.split()[0] in MANAGER_COMMANDS:
            continue
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", step],
            cwd=clone,
            env=shell_env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, f"{step}\n{done.stdout}\n{done.stderr}"
        ran.append(step)
    assert any("pip install" in s for s in ran) and any("systemd/user" in s for s in ran), ran
    unit = home / ".config" / "systemd" / "user" / "compactd.service"
    assert unit.is_file()
    argv, unit_env = unit_directives(unit, home)
    assert argv[-1] == "run", argv
    # The user manager's environment is the unit's Environment= and little else (never the login shell's PATH).
    manager_env = {"HOME": str(home), **unit_env}
    version = subprocess.run(
        [*argv[:-1], "--version"], env=manager_env, capture_output=True, text=True, timeout=120
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"compactd {__version__}"
    # The daemon's imports, not just the CLI's: its command line parses and its modules load in that venv.
    resolved = shutil.which("compactd", path=unit_env["PATH"])
    assert resolved is not None and resolved.startswith(str(home)), resolved
    imports = subprocess.run(
        [
            str(Path(resolved).resolve().parent / "python"),
            "-c",
            "import compactd.service, compactd.sources.openclaw, compactd.state._prom, watchfiles, zstandard, websockets",
        ],
        env=manager_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imports.returncode == 0, imports.stderr
    # The OpenClaw plugin is where the README says.
    plugin = home / ".local/share/compactd/venv/share/compactd/openclaw/compactd"
    for name in PLUGIN_FILES:
        assert (plugin / name).read_bytes() == (REPO / "integrations/openclaw/compactd" / name).read_bytes()
    assert (home / ".local/bin/compactd").resolve() == Path(resolved).resolve()


@pytest.mark.slow
def test_the_wheel_carries_the_package_and_the_openclaw_plugin(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), "."],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    [wheel] = tmp_path.glob("compactd-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    data = f"compactd-{__version__}.data/data/share/compactd/openclaw/compactd"
    assert {f"{data}/{n}" for n in PLUGIN_FILES} <= names
    modules = {str(p.relative_to(REPO / "daemon")) for p in (REPO / "daemon" / "compactd").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]
