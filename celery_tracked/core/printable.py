"""Job data made safe to show a human: control characters rendered visibly escaped.

A job's error message, stage, key, type, task name, owner, log lines... come from the
application and from its callers; printed raw, an ``ESC ] 0 ; … BEL`` sets a terminal's
title, ``ESC [ 2 J`` clears the screen, colour codes paint fake lines, a bidi override
reorders what is read. :func:`visible` writes every such character as its escape
(``\\x1b``, ``\\x07``, ``\\n``, ``\\u202e``), so the text shown is the text stored, byte for
byte readable, and nothing a terminal acts on. The CLI applies it to every cell it prints,
the library to the log lines it writes about jobs.

:func:`storable` makes a text one every database can hold: a lone surrogate (a file name
decoded with ``surrogateescape``: ``"\\udcff"``) and NUL are written as their escapes, so
an error message, stage, event or log line holding one is saved, visibly, instead of
failing the write (UTF-8 encoders refuse surrogates, PostgreSQL refuses NUL). The store
applies it to every text parameter it sends (:func:`storable_params`). Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["storable", "storable_params", "visible"]

#: C0 and C1 controls, DEL, the line and paragraph separators, the bidirectional marks,
#: embeddings, overrides and isolates, and lone surrogates (no terminal or log file can
#: write them)
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
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


def storable(text: str) -> str:
    """``text`` as every database can store it: lone surrogates backslash-escaped
    (``"x\\udcff"`` → ``"x\\\\udcff"``), NUL as ``\\x00``; any other text unchanged (an
    ASCII text without NUL, the usual case, is returned after one quick check)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _plain(value: Any) -> bool:
    """``value`` needs no change: not a text, or an ASCII text without NUL (the fast
    check run on every parameter of every statement)."""
    if isinstance(value, str):
        return value.isascii() and "\x00" not in value
    return not isinstance(value, (dict, list, tuple))


def _storable_value(value: Any) -> Any:
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, (dict, list, tuple)):
        return storable_params(value)
    return value


def storable_params(params: Any) -> Any:
    """Statement parameters (a dict, a list or tuple, or a list of them for many rows)
    with every text made :func:`storable`; the very object given when nothing changed."""
    if isinstance(params, dict):
        if all(_plain(v) for v in params.values()):
            return params
        fixed = {k: _storable_value(v) for k, v in params.items()}
        return params if all(fixed[k] is v for k, v in params.items()) else fixed
    if isinstance(params, (list, tuple)):
        if all(_plain(v) for v in params):
            return params
        items = [_storable_value(v) for v in params]
        if all(a is b for a, b in zip(items, params, strict=True)):
            return params
        return tuple(items) if isinstance(params, tuple) else items
    return params


def duration(seconds: float | None) -> str:
    """A duration: "850ms", "12.3s", "4m 05s", "2h 03m"; "-" for None."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m {int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h {int(seconds % 3600 // 60):02d}m"
