"""Payload checks and redaction: JSON, size, secret keys, credentials in URLs.

Pure functions, no I/O. Names are compared normalised (:func:`normalise_key`: lower case,
``-`` and camelCase humps become ``_``). A name is secret when a configured redact key
matches it (:func:`is_secret_key`):

- a key of 5 characters or more matches anywhere in the name (``db_password`` matches
  ``password``);
- a shorter key (``pwd``, ``otp``, ``jwt``, ``ssn``, ``cvv``, ``auth``) matches only as a
  whole ``_``-separated word (``user_pwd`` and ``auth_header`` match, ``author`` and
  ``footprint`` do not);
- a key starting with ``*`` (``*_key``) matches names ending with the rest, except the
  harmless names of :data:`NOT_SECRET_NAMES` (``idempotency_key``, ``cache_key``...).

A string value holding a URL with credentials (``scheme://user:pass@host``) keeps its
shape with the user-info masked, wherever it sits.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, time
from decimal import Decimal
from typing import Any

from .codec import PAYLOAD_DEPTH, encode
from .errors import MASK, PayloadNotSerializable, PayloadTooLarge, mask_url, url_userinfo

#: Stored in place of a redacted value.
REDACTED = "[redacted]"
#: Keys shorter than this match whole words only.
_SUBSTRING_MIN = 5
#: Names a ``*_...`` pattern never redacts: identifiers, not credentials.
NOT_SECRET_NAMES = frozenset(
    {
        "idempotency_key",
        "cache_key",
        "sort_key",
        "primary_key",
        "foreign_key",
        "partition_key",
        "routing_key",
        "lookup_key",
        "dedup_key",
        "object_key",
        "storage_key",
        "group_key",
    }
)
#: Values under a secret name collected by :func:`secret_values` (as ``str``, a UUID's hex too).
_SCALARS = (str, int, float, Decimal, uuid.UUID, date, time)
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def normalise_key(name: str) -> str:
    """``X-Auth-Token``, ``xAuthToken`` and ``x_auth_token`` all become ``x_auth_token``."""
    return _HUMP.sub("_", name.strip()).lower().replace("-", "_")


def key_matches(key: str, name: str) -> bool:
    """Does the (normalised) redact ``key`` match the (normalised) ``name``?"""
    if key.startswith("*"):
        return name.endswith(key[1:]) and name not in NOT_SECRET_NAMES
    if len(key) >= _SUBSTRING_MIN:
        return key in name
    return f"_{key}_" in f"_{name}_"


def is_secret_key(key: object, redact_keys: Iterable[str]) -> bool:
    if not isinstance(key, str):
        return False
    name = normalise_key(key)
    return any(key_matches(normalise_key(k), name) for k in redact_keys)


def redact(value: Any, redact_keys: Sequence[str]) -> Any:
    """A copy of ``value`` with every value under a secret key replaced by ``REDACTED``
    and the credentials of URLs in strings masked."""
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if is_secret_key(k, redact_keys) else redact(v, redact_keys))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v, redact_keys) for v in value]
    if isinstance(value, str) and "@" in value:
        return mask_url(value)
    return value


def url_credentials(text: str) -> list[str]:
    """The user-info parts of the URLs in ``text`` (``user:pass`` and ``pass``)."""
    found: list[str] = []
    for creds in url_userinfo(text):
        if creds == MASK:
            continue
        found.append(creds)
        password = creds.partition(":")[2]
        if len(password) >= 3:
            found.append(password)
    return found


def secret_values(value: Any, redact_keys: Sequence[str]) -> list[str]:
    """Every string (or number) found under a secret key, and every credential inside a
    URL, each once, to mask them in messages."""
    found: list[str] = []

    def walk(node: Any, secret: bool) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, secret or is_secret_key(k, redact_keys))
        elif isinstance(node, list | tuple):
            for v in node:
                walk(v, secret)
        elif secret and isinstance(node, _SCALARS) and not isinstance(node, bool):
            texts = [str(node), node.hex] if isinstance(node, uuid.UUID) else [str(node)]
            found.extend(text for text in texts if len(text) >= 3)
        elif isinstance(node, str) and "@" in node:
            found.extend(url_credentials(node))

    walk(value, False)
    return list(dict.fromkeys(found))  # each once, in order


def encode_payload(args: Sequence[Any], kwargs: Mapping[str, Any], max_bytes: int) -> int:
    """Check the call's arguments are Celery's JSON (:mod:`celery_tracked.codec`) and
    within the size limit, measured on that encoded form; return their size.

    Raises:
        PayloadNotSerializable: an argument is not JSON-serialisable (or nests containers
            deeper than ``codec.MAX_DEPTH``, or contains itself).
        PayloadTooLarge: the encoded arguments exceed ``max_bytes``.
    """
    try:
        encoded = encode({"args": list(args), "kwargs": dict(kwargs)}, PAYLOAD_DEPTH)
    except (TypeError, ValueError) as exc:
        raise PayloadNotSerializable(f"arguments are not JSON-serialisable: {exc}") from None
    size = len(encoded.encode("utf-8"))
    if size > max_bytes:
        raise PayloadTooLarge(
            f"arguments are {size} bytes encoded, over the limit of {max_bytes} "
            "(tracked_max_payload_bytes); pass identifiers, keep large content in storage"
        )
    return size


def holds_redacted(value: Any) -> bool:
    """``value`` (a decoded payload, or part of one) lost something to redaction: the
    redaction marker, or a URL whose credentials were masked."""
    if isinstance(value, dict):
        return any(holds_redacted(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(holds_redacted(v) for v in value)
    if isinstance(value, str) and "@" in value and MASK in url_userinfo(value):
        return True
    return bool(value == REDACTED)
