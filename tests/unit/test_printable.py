"""Job data shown to a human: every control character visibly escaped (issue 22, item 9)."""

from __future__ import annotations

import pytest

from celery_tracked.core.printable import visible


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain text, ünïcødé, 日本語, emoji 🎉", "plain text, ünïcødé, 日本語, emoji 🎉"),
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
        ("\x1b[2J\x1b[31mred\x1b[0m", "\\x1b[2J\\x1b[31mred\\x1b[0m"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\x00\x7f\x9b", "\\x00\\x7f\\x9b"),
        ("\u202eevil\u2066\u2028", "\\u202eevil\\u2066\\u2028"),
        ("C:\\path", "C:\\path"),
        ("/tmp/x\udcff.pdf", "/tmp/x\\udcff.pdf"),  # a lone surrogate (os.fsdecode)
    ],
)
def test_control_characters_are_escaped_and_nothing_else(raw: str, shown: str) -> None:
    assert visible(raw) == shown
    assert visible(visible(raw)) == shown  # escaping twice changes nothing more
