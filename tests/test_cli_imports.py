"""What a command loads: ``once --dry-run`` reads, decides and, for a due session, plans the job as the run would
(the engine with the digest standing in for the summary: the dry run is the run), so the model client and the
watcher (watchfiles pulls in multiprocessing) stay unloaded; they cost a third of its time when they did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.corpus import generate_session

REPO = Path(__file__).resolve().parents[1]
LOADED = """
import json, sys
from compactd.commands.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""
NOT_FOR_A_DRY_RUN = (
    "compactd.summarize.llm",
    "watchfiles",
    "openai",
    "compactd.sources.codex._hook",  # Codex's PreCompact hook: only ``compactd hook``
    "compactd.sources.openclaw._doctor",  # only ``doctor``
    "compactd.sources.openclaw._source",  # the other session sources: built when a pass or the service uses them
    "compactd.sources.codex._source",
    # What writing a summary needs: a dry run plans the job as the run does (issue 20), but writes the digest only
    # when its length could change the route (``job.predict_route``), never for a route that prunes alone.
    "compactd.summarize.identifiers",
    "compactd.summarize.digest",
    "compactd.summarize.stages",
    "compactd.summarize.quality",
    "compactd.summarize.sanitize",
    "compactd.summarize.augment",
    "compactd.summarize.fileops",
    "compactd.core.repair",
    "compactd.summarize.redact",  # the transcript's rules: a printed or logged line needs the URL rules alone
    # The commit (its journal, rotation, restore): a dry run writes nothing.
    "compactd.commit.commit",
    "compactd.commit.journal",
    "compactd.commit.atomic",  # the rewrite protocol and the successor's builder: a plan needs only ``notes``
    "compactd.commit.successor",
    # An event loop: a dry run's work never waits (``offload.run_inline``).
    "asyncio",
    "anyio._backends._asyncio",
    "socket",  # systemd's notify socket: only ``run`` sends to it
    "anyio._core._synchronization",  # anyio's events and limiters: nothing waits, no model is called
    "difflib",  # the configuration's "did you mean" for an unknown key
    "anyio",  # nothing waits: no loop, no worker, no thread to hand work to (the lazy imports are where used)
    "signal",  # the service's signal handlers, and the workspace's child acting as another user
    "select",
    "compactd.state._status",  # status.json and the ``status`` table: a dry run writes and shows no status
    "yaml",  # a configuration file of nested ``key: value`` lines is read without it (``config._plain``)
    "compactd.sources.files.preparer",  # what is prepared as read, while serving: made by ``start`` alone
    "queue",  # the preparer's
    "hashlib",  # what hashes saved state, snapshots, claims and v1 ids: a dry run saves, checks and takes none
    "shutil",  # and with it zlib, bz2 and lzma: argparse sizes its help without it (``cli.help_width``)
    "zlib",  # the snapshots' shards: a dry run loads and saves none
)

# What ``inspect`` of a session whose route prunes alone never uses: what only writing a summary or a commit
# needs (its output and logs are scrubbed by ``secret_rules``' URL rules, not the transcript's rules).
NOT_FOR_INSPECT = {
    "compactd.summarize.redact",
    "compactd.summarize.augment",
    "compactd.summarize.fileops",
    "compactd.core.repair",
    "compactd.commit.atomic",
    "compactd.commit.successor",
    "compactd.sources.files.preparer",  # the store of what was prepared as read: a summary's
    "difflib",  # the configuration's "did you mean" for an unknown key
    "anyio",  # as a dry run: nothing waits
    "signal",
    "select",
    "compactd.state._status",
    "yaml",
    "hashlib",  # as a dry run: no state, snapshot or claim is hashed (nor a v1 session's ids, for a v2 one)
    "shutil",
    "zlib",
}


def loaded_by(*argv: str) -> tuple[int, str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *argv], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], done.stdout, set(report["modules"])


def test_once_dry_run_over_a_due_session_loads_no_summarizer_and_no_watcher(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    generate_session(
        sessions / "big.jsonl", 900_000, seed=3
    )  # about 225,000 tokens: over the 180,000 threshold
    config = tmp_path / "config.yaml"
    config.write_text(f"sessions:\n  roots: [{sessions}]\nstate_dir: {tmp_path / 'state'}\n")

    code, out, modules = loaded_by("once", "--dry-run", "--config", str(config))

    assert code == 0, out
    assert "big.jsonl" in out and "route=truncate_tool_results_only" in out  # due, and a route was planned
    assert not modules & set(NOT_FOR_A_DRY_RUN), sorted(modules & set(NOT_FOR_A_DRY_RUN))


def test_a_model_free_compact_loads_no_model_stage(tmp_path: Path) -> None:
    """``compact`` without a summarizer writes the digest: the model's stages, pacing and client stay unloaded."""
    path = tmp_path / "s.jsonl"
    generate_session(path, 300_000, seed=3)
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nmemory_flush:\n  enabled: false\n")

    code, out, modules = loaded_by("compact", str(path), "--force", "--json", "--config", str(config))

    assert code == 0 and json.loads(out)["committed"] is True, out
    unloaded = {"compactd.summarize.stages", "compactd.summarize.pace", "compactd.summarize.llm", "openai"}
    assert not modules & unloaded, sorted(modules & unloaded)


def test_a_command_on_the_built_in_defaults_or_a_plain_file_loads_no_yaml(tmp_path: Path) -> None:
    """yaml (about 15 ms to import) is loaded to read a configuration file of another shape than nested
    ``key: value`` lines (``config._plain`` reads those), never for the built-in defaults."""
    path = tmp_path / "s.jsonl"
    generate_session(path, 50_000, seed=3)
    env = {k: v for k, v in os.environ.items() if k != "COMPACTD_CONFIG"}
    env.update(
        HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_STATE_HOME=str(tmp_path / "state")
    )
    if os.path.isfile("/etc/compactd/config.yaml"):
        pytest.skip("a system configuration file is installed")

    def modules_of(*argv: str) -> set[str]:
        done = subprocess.run(
            [sys.executable, "-c", LOADED, *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        report = json.loads(done.stderr.strip().splitlines()[-1])
        assert report["code"] == 0, done.stdout
        return set(report["modules"])

    assert "yaml" not in modules_of("inspect", str(path))
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\n")
    assert "yaml" not in modules_of("inspect", str(path), "--config", str(config))
    config.write_text(f"state_dir: &dir {tmp_path / 'state'}\n")  # an anchor: PyYAML reads it
    assert "yaml" in modules_of("inspect", str(path), "--config", str(config))


def test_inspect_of_a_due_session_predicts_its_route_without_an_event_loop(tmp_path: Path) -> None:
    """``inspect`` predicts the route as ``once --dry-run`` does (``offload.run_inline``): no event loop either."""
    path = tmp_path / "big.jsonl"
    generate_session(path, 900_000, seed=3)  # over the threshold: a route is predicted
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\n")

    code, out, modules = loaded_by("inspect", str(path), "--json", "--config", str(config))

    assert code == 0 and json.loads(out)["route"] == "truncate_tool_results_only", out
    event_loop = {"asyncio", "anyio._backends._asyncio", "anyio._core._synchronization"}
    assert not modules & event_loop, sorted(modules & event_loop)
    assert not modules & NOT_FOR_INSPECT, sorted(modules & NOT_FOR_INSPECT)


@pytest.mark.parametrize("columns", [None, "50", "200", "0", "-3", "wide"])
def test_the_help_is_as_wide_as_argparse_makes_it(
    columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cli.help_width`` sizes the help as argparse does by default, without the shutil it imports to do so."""
    import shutil

    from compactd.commands.cli import help_width

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert help_width() == shutil.get_terminal_size().columns - 2
