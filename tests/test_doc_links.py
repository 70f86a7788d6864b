"""Every relative link in README.md and docs/*.md leads to a file of the repository.

A user who clones docex reads these pages on disk or on a forge: a link outside
the repository, or to a file that was moved, is a dead link for them. Anchors
(`file.md#section`) must name a heading of the target.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))  # code samples are not links
    return [target for target in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def anchors(page: Path) -> set[str]:
    """Heading anchors the way GitHub makes them: lower case, punctuation dropped, spaces to `-`."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    headings = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_pages_are_found() -> None:
    assert REPO / "docs" / "api.md" in PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve_to_files_in_the_repository(page: Path) -> None:
    def leads_somewhere(target: str) -> bool:
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.is_relative_to(REPO) or not resolved.is_file():
            return False
        return not anchor or resolved.suffix != ".md" or anchor in anchors(resolved)

    assert [target for target in links(page) if not leads_somewhere(target)] == []
