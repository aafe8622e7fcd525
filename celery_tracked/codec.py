"""The one JSON form of stored payloads and results: Celery's own (kombu's) JSON.

``payload_json`` and ``result_json`` are written with :func:`kombu.utils.json.dumps` and
read back with :func:`kombu.utils.json.loads`, so whatever Celery's JSON serializer
carries in a message is stored and given back with its type: ``datetime``, ``date``,
``time``, ``Decimal``, ``UUID``, ``bytes`` and any type registered with
:func:`kombu.utils.json.register_type`. Such a value is stored in kombu's tagged form,
``{"__type__": "datetime", "__value__": "2024-05-01T12:00:00+00:00"}``. Plain JSON values
are stored as plain JSON; NaN and infinities are refused.
"""

from __future__ import annotations

from typing import Any

from kombu.utils.json import dumps, loads


def encode(value: Any) -> str:
    """``value`` in kombu's JSON, compact; it must read back (:func:`decode`).

    Raises:
        TypeError: (or ``ValueError``) ``value`` is not what Celery's JSON carries.
    """
    text: str = dumps(value, allow_nan=False, separators=(",", ":"))
    if '"__type__"' in text:  # a tagged dict of an unknown type would not read back
        decode(text)  # refuse it now (only tagged values need this second parse)
    return text


def decode(text: str) -> Any:
    """A stored ``payload_json``/``result_json`` with its types (kombu's tagged values)."""
    return loads(text)
