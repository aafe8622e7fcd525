"""The service's idempotency keys: scoped per caller, unambiguously.

A key is made of components (the caller's user id, what it is for, and its value: the
``Idempotency-Key`` header's text, or the document of an OCR job); each is percent-encoded
(``:`` becomes ``%3A``) and they are joined by ``:``, so two different tuples never give
the same key (``acme`` + ``x:1`` is ``acme:key:x%3A1``, ``acme:x`` + ``1`` is
``acme%3Ax:key:1``). A key longer than the column (255 characters) is the SHA-256 of the
tuple's JSON instead (``h:<hex>``: two components, never the three of a readable key).
"""

from __future__ import annotations

import hashlib
import json
from urllib.parse import quote

#: the tracking table's ``idempotency_key`` column
MAX_STORED = 255


def scoped_key(user: str, kind: str, value: str) -> str:
    """The key of ``value`` (``kind``: ``key`` for a header, ``ocr`` for a document) for
    the caller ``user``: never equal to another caller's, nor to another kind's."""
    readable = ":".join(quote(part, safe="") for part in (user, kind, value))
    if len(readable) <= MAX_STORED:
        return readable
    digest = hashlib.sha256(json.dumps([user, kind, value]).encode()).hexdigest()
    return f"h:{digest}"


def rate_key(user: str, minute: int) -> str:
    """The Redis counter of ``user``'s submissions in ``minute``."""
    return f"service:rate:{quote(user, safe='')}:{minute}"
