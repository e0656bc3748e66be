"""AGENTS.md section extraction and the post-compaction context (design.md §6.11)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from compactd import agents_md
from compactd.agents_md import (
    HEADER,
    TRUNCATED_MARKER,
    extract_sections,
    find_agents_md,
    post_compaction_context,
    read_agents_md,
)

NOW = datetime(2026, 5, 6, 14, 3, 9, tzinfo=timezone(timedelta(hours=2)))

AGENTS = """# Workspace

Intro text.

## Session Startup

1. Read SOUL.md.
2. Read memory/YYYY-MM-DD.md (today) and yesterday's file.

### Details

Deeper heading stays inside.

#### Even deeper

Still inside.

## Tools

Use ripgrep.

```markdown
## Red Lines
Not a heading: inside a code fence.
```

## red lines

- Never run `rm -rf /`.
- Ask before sending e-mail.

```sh
## a comment in a fence, inside the section
```

# Appendix

Not part of any section.
"""


def test_extracts_sections_in_name_order_with_deeper_headings() -> None:
    startup, red = extract_sections(AGENTS, ["Session Startup", "Red Lines"])
    assert startup.startswith("## Session Startup\n\n1. Read SOUL.md.")
    assert "### Details\n\nDeeper heading stays inside." in startup
    assert "#### Even deeper\n\nStill inside." in startup
    assert "## Tools" not in startup and "Use ripgrep" not in startup
    assert startup == startup.strip()
    # The fenced "## Red Lines" is skipped; the real (lower-case) heading is found case-insensitively.
    assert red.startswith("## red lines\n\n- Never run `rm -rf /`.")
    assert "Not a heading: inside a code fence." not in red
    assert "## a comment in a fence, inside the section" in red  # fence content kept, not a section break
    assert "# Appendix" not in red and "Not part of any section" not in red
    reversed_order = extract_sections(AGENTS, ["Red Lines", "Session Startup"])
    assert reversed_order == [red, startup]


@pytest.mark.parametrize(
    ("markdown", "names", "expected"),
    [
        ("## A\none\n## B\ntwo", ["a"], ["## A\none"]),
        ("### A\none\n### B\ntwo", ["A"], ["### A\none"]),
        ("### A\none\n## B\ntwo", ["A"], ["### A\none"]),  # higher level ends it
        ("## A\none\n### B\ntwo\n## C", ["A"], ["## A\none\n### B\ntwo"]),
        ("# A\none", ["A"], []),  # level 1 is not a section heading
        ("#### A\none", ["A"], []),  # nor level 4
        ("##A\none", ["A"], []),  # needs whitespace after the hashes
        ("## A ##\none\n## B", ["A"], ["## A ##\none"]),  # closing hashes ignored
        ("## A\none\n## A\nsecond", ["A"], ["## A\none"]),  # the first occurrence
        ("```\n## A\n```\n## A\nreal", ["A"], ["## A\nreal"]),
        ("  ```\n## A\n  ```\n## A\nreal", ["A"], ["## A\nreal"]),  # indented fence lines toggle too
        ("## A\n\n\n", ["A"], ["## A"]),
        ("", ["A"], []),
    ],
)
def test_extract_sections_table(markdown: str, names: list[str], expected: list[str]) -> None:
    assert extract_sections(markdown, names) == expected


def test_legacy_names_only_for_the_default_set_and_only_when_nothing_found() -> None:
    legacy = "## Every Session\nRead SOUL.md first.\n\n## Safety\nNo destructive commands.\n"
    text = post_compaction_context(legacy, now=NOW)
    assert text is not None
    assert "## Every Session\nRead SOUL.md first.\n\n## Safety\nNo destructive commands." in text
    # The default set in another order and case still counts as the default set.
    assert post_compaction_context(legacy, sections=("red lines", "SESSION STARTUP"), now=NOW) is not None
    # A custom set gets no legacy fallback.
    assert post_compaction_context(legacy, sections=("Boot",), now=NOW) is None
    # When a default section exists, legacy sections are not added.
    mixed = legacy + "\n## Red Lines\nNever push to main.\n"
    text = post_compaction_context(mixed, now=NOW)
    assert text is not None and "Never push to main." in text and "Every Session" not in text


def test_post_compaction_context_text() -> None:
    text = post_compaction_context(AGENTS, now=NOW)
    assert text is not None
    parts = text.split("\n\n")
    assert parts[0] == HEADER
    assert "Session Startup" in parts[1] and "hint" in parts[1] and "read the files" in parts[1]
    assert parts[2] == "Critical rules from AGENTS.md:"
    assert "memory/2026-05-06.md" in text and "YYYY-MM-DD" not in text
    assert text.index("## Session Startup") < text.index("## red lines")
    assert text.endswith("\n\nCurrent time: 2026-05-06T14:03:09+02:00 (Wednesday)")


def test_custom_sections_are_named() -> None:
    text = post_compaction_context(AGENTS, sections=("Tools",), now=NOW)
    assert text is not None
    assert "Injected sections from AGENTS.md (Tools):" in text
    assert "Critical rules from AGENTS.md:" not in text
    assert "## Tools\n\nUse ripgrep." in text


def test_disabled_or_nothing_found() -> None:
    assert post_compaction_context(AGENTS, sections=(), now=NOW) is None
    assert post_compaction_context("# Title\njust text\n", now=NOW) is None


def test_truncation_marker_after_max_chars() -> None:
    big = "## Red Lines\n" + "\n".join(f"- rule {i} for YYYY-MM-DD" for i in range(400))
    text = post_compaction_context(big, now=NOW)
    assert text is not None
    content = text.split("Critical rules from AGENTS.md:\n\n", 1)[1].split("\n\nCurrent time:", 1)[0]
    assert content.endswith(TRUNCATED_MARKER)
    assert len(content) == 1800 + len(TRUNCATED_MARKER)
    assert "YYYY-MM-DD" not in content  # replaced before cutting
    short = post_compaction_context("## Red Lines\nOne rule.", max_chars=1800, now=NOW)
    assert short is not None and TRUNCATED_MARKER not in short


# --- reading from the workspace -----------------------------------------------------------------------------
def test_find_and_read_agents_md(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text(AGENTS, encoding="utf-8")
    assert find_agents_md(tmp_path) == (tmp_path / "AGENTS.md").resolve()
    assert read_agents_md(tmp_path) == AGENTS


def test_missing_agents_md_or_workspace(tmp_path: Path) -> None:
    assert find_agents_md(tmp_path) is None
    assert read_agents_md(tmp_path) is None
    assert find_agents_md(tmp_path / "nope") is None
    (tmp_path / "AGENTS.md").mkdir()
    assert find_agents_md(tmp_path) is None  # a directory is not a rules file


def test_symlink_escaping_the_workspace_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = tmp_path / "secret.md"
    outside.write_text("## Red Lines\nleak\n", encoding="utf-8")
    (workspace / "AGENTS.md").symlink_to(outside)
    assert find_agents_md(workspace) is None
    assert read_agents_md(workspace) is None


def test_relative_symlink_escaping_through_parent_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "docs").mkdir(parents=True)
    (tmp_path / "other.md").write_text("x", encoding="utf-8")
    (workspace / "AGENTS.md").symlink_to("docs/../../other.md")
    assert find_agents_md(workspace) is None


def test_symlink_inside_the_workspace_is_followed(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "docs").mkdir(parents=True)
    real = workspace / "docs" / "agents.md"
    real.write_text("## Red Lines\nstay\n", encoding="utf-8")
    (workspace / "AGENTS.md").symlink_to(real)
    assert find_agents_md(workspace) == real.resolve()
    assert read_agents_md(workspace) == "## Red Lines\nstay\n"


def test_workspace_reached_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "AGENTS.md").write_text("## Red Lines\nok\n", encoding="utf-8")
    link = tmp_path / "link"
    link.symlink_to(real)
    assert read_agents_md(link) == "## Red Lines\nok\n"


def test_symlink_loop_and_dangling_link(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").symlink_to(tmp_path / "AGENTS.md")
    assert find_agents_md(tmp_path) is None
    other = tmp_path / "w2"
    other.mkdir()
    (other / "AGENTS.md").symlink_to(other / "missing.md")
    assert find_agents_md(other) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_gives_none(tmp_path: Path) -> None:
    path = tmp_path / "AGENTS.md"
    path.write_text("## Red Lines\nx\n", encoding="utf-8")
    path.chmod(0)
    try:
        assert read_agents_md(tmp_path) is None
    finally:
        path.chmod(0o644)


def test_oversized_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_bytes(b"## Red Lines\n" + b"x" * 100)
    assert read_agents_md(tmp_path, max_bytes=50) is None
    assert read_agents_md(tmp_path, max_bytes=200) is not None


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_bytes(b"## Red Lines\nbad \xff byte\n")
    text = read_agents_md(tmp_path)
    assert text is not None and "bad \ufffd byte" in text
    refresh = agents_md.post_compaction_context(text, now=NOW)
    assert refresh is not None and "## Red Lines\nbad \ufffd byte" in refresh
