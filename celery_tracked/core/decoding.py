"""Reading the one stored JSON form back (``codec.py`` writes it): :func:`decode`.

A leaf: it imports nothing of the package, so the values in ``jobs.py`` (which ``errors.py``
names) and ``codec.py`` (which raises ``errors.py``'s errors) share it without an import
circle.
"""

from __future__ import annotations

from typing import Any

from kombu.utils.json import loads

__all__ = ["decode"]


def decode(text: str) -> Any:
    """A stored ``payload_json``/``result_json`` with its types (kombu's tagged values)."""
    return loads(text)
