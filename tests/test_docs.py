"""Every ``design.md §N`` the code cites names a section of docs/design.md, and no citation points outside the
repository (the reference docs the code once cited were never in it)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DESIGN = REPO / "docs" / "design.md"
OUTSIDE = re.compile(
    r"\b(?:spec-openclaw|spec-pi-session-format|engineering\.md|perf-baseline|peers\.md|spec) §"
)


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "daemon", "tests", "bench", "integrations", "README.md", "config.example.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [REPO / name for name in listed if name.endswith((".py", ".md", ".js", ".yaml", ".json", ".mjs"))]


def _sections() -> set[str]:
    heads = re.findall(r"^#{2,3} ([0-9]+(?:\.[0-9]+)?)[. ]", DESIGN.read_text(encoding="utf-8"), flags=re.M)
    return set(heads)


def test_every_design_citation_names_a_section() -> None:
    sections = _sections()
    assert {"6.1", "6.13", "7.8"} <= sections
    missing = []
    for path in _tracked_text_files():
        if not path.exists():
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for match in re.finditer(r"design\.md §§?([0-9.,\- –and]+)", line):
                for number in re.findall(r"[0-9]+(?:\.[0-9]+)?", match.group(1)):
                    if number.rstrip(".") not in sections:
                        missing.append(f"{path.relative_to(REPO)}:{lineno}: §{number}")
    assert not missing, "citations of sections docs/design.md does not have:\n" + "\n".join(missing)


def test_no_citation_of_a_document_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(REPO)}:{lineno}"
        for path in _tracked_text_files()
        if path.exists() and path != Path(__file__)
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "citations of documents that are not in the repository:\n" + "\n".join(found)
