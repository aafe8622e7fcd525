"""Issue 22, item 12: a delivery that runs nothing (a stale or duplicate message) is a
``skipped`` transition, logged and counted, but writes no row of the job's history; the
docs used to call it "a ``skipped`` event" (the word for a history row)."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_no_page_calls_a_skipped_delivery_an_event() -> None:
    claims = [
        f"{page.name}: {match.group(0)!r}"
        for page in sorted(DOCS.glob("*.md"))
        for match in re.finditer(r"`skipped`\s+event", page.read_text())
    ]
    assert claims == []
