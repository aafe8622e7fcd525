"""Job data made safe to show a human: control characters rendered visibly escaped.

A job's error message, stage, key, type, task name, owner, log lines... come from the
application and from its callers; printed raw, an ``ESC ] 0 ; … BEL`` sets a terminal's
title, ``ESC [ 2 J`` clears the screen, colour codes paint fake lines, a bidi override
reorders what is read. :func:`visible` writes every such character as its escape
(``\\x1b``, ``\\x07``, ``\\n``, ``\\u202e``), so the text shown is the text stored, byte for
byte readable, and nothing a terminal acts on. The CLI applies it to every cell it prints,
the library to the log lines it writes about jobs. Pure: no I/O.
"""

from __future__ import annotations

import re

__all__ = ["visible"]

#: C0 and C1 controls, DEL, the line and paragraph separators, and the bidirectional
#: marks, embeddings, overrides and isolates
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    named = _NAMED.get(char)
    if named is not None:
        return named
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character escaped (``"\\x1b[2J"`` → ``"\\\\x1b[2J"``)."""
    return _CONTROL.sub(_escape, text)
