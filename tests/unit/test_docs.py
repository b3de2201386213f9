"""The docs speak to users about the product as it is: no development narrative, no issue numbers
of ours, no contract outside the repository, and links that lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.harness import ROOT

PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
ORDINAL = r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(?:st|nd|rd|th))"
NARRATIVE = [
    re.compile(rf"\b{ORDINAL}[- ]session", re.I),
    re.compile(r"\b(?:this|that|last|next|earlier|previous) session", re.I),
    re.compile(r"\bsession \d+", re.I),
    re.compile(r"(?<!upstream )\bissue #?\d+", re.I),
    re.compile(r"\bSPEC\b"),
]
LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)#\s]+)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_tell_no_development_story(page: Path) -> None:
    text = page.read_text()
    found = [m.group(0) for pattern in NARRATIVE for m in pattern.finditer(text)]
    assert not found, f"{page.name}: {found}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_lead_to_files(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_the_contract_is_a_page_and_the_docs_point_at_it() -> None:
    contract = (ROOT / "docs" / "contract.md").read_text()
    sections = re.findall(r"^## (\d+)\. ", contract, re.M)
    assert sections == [str(n) for n in range(1, 17)]
    assert "docs/contract.md" in (ROOT / "README.md").read_text()
