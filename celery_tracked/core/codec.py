"""The one JSON form of stored payloads and results: Celery's own (kombu's) JSON.

``payload_json`` and ``result_json`` are written with :func:`kombu.utils.json.dumps` and
read back with :func:`kombu.utils.json.loads` (:func:`decode`, a leaf in ``decoding.py``),
so whatever Celery's JSON serializer carries in a message is stored and given back with
its type: ``datetime``, ``date``, ``time``, ``Decimal``, ``UUID``, ``bytes`` and any type
registered with :func:`kombu.utils.json.register_type`. Such a value is stored in kombu's
tagged form, ``{"__type__": "datetime", "__value__": "2024-05-01T12:00:00+00:00"}``. Plain
JSON values are stored as plain JSON; NaN and infinities are refused.

A stored document may nest containers (dicts, lists, tuples) at most
:data:`PAYLOAD_DEPTH` levels deep (an argument :data:`MAX_DEPTH`), and never contain
itself: :func:`check_depth` walks it without recursion before anything else does, so the
recursive passes after it (redaction, secret collection, the encoder) have the stack they
need.
"""

from __future__ import annotations

from typing import Any

from kombu.utils.json import dumps

from .decoding import decode as decode  # re-exported: the one reading of the form
from .errors import PayloadNotSerializable

#: The deepest nesting of containers an argument may have: ``[[1]]`` is 2 levels deep.
MAX_DEPTH = 100
#: The same for a stored document (``payload_json``, whose ``{"args": [...], "kwargs":
#: {...}}`` wraps the arguments in two more levels; ``result_json``).
PAYLOAD_DEPTH = MAX_DEPTH + 2
_CONTAINERS = (dict, list, tuple)


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """Refuse a ``value`` whose containers nest more than ``limit`` levels, or that
    contains itself. Iterative: never raises ``RecursionError``.

    Raises:
        PayloadNotSerializable: (a ``ValueError`` and a ``TypeError``) saying which.
    """
    if not isinstance(value, _CONTAINERS):
        return
    path = [id(value)]  # the containers from the top to the one being walked
    pending = [_inner(value)]  # for each of them, its inner containers not walked yet
    while pending:
        if not pending[-1]:
            pending.pop()
            path.pop()
            continue
        inner = pending[-1].pop()
        if id(inner) in path:
            raise PayloadNotSerializable("a container holds itself (a circular reference)")
        if len(path) >= limit:
            raise PayloadNotSerializable(_too_deep(limit))
        path.append(id(inner))
        pending.append(_inner(inner))


def _too_deep(limit: int) -> str:
    return f"containers nested more than {limit} levels deep"


def _inner(container: Any) -> list[Any]:
    values = container.values() if isinstance(container, dict) else container
    return [v for v in values if isinstance(v, _CONTAINERS)]


def encode(value: Any, max_depth: int = PAYLOAD_DEPTH) -> str:
    """``value`` in kombu's JSON, compact; it must read back (:func:`decode`).

    Raises:
        TypeError: (or ``ValueError``) ``value`` is not what Celery's JSON carries;
            ``PayloadNotSerializable`` (both) when it nests containers more than
            ``max_depth`` levels deep or contains itself (:func:`check_depth`).
    """
    check_depth(value, max_depth)
    try:
        text: str = dumps(value, allow_nan=False, separators=(",", ":"))
    except RecursionError:  # the caller was already deep in the stack, or a registered type
        raise PayloadNotSerializable(
            "too deeply nested to encode here (Python's recursion limit)"
        ) from None
    if '"__type__"' in text:  # a tagged dict of an unknown type would not read back
        decode(text)  # refuse it now (only tagged values need this second parse)
    return text
