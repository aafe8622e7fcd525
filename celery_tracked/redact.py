"""Payload checks and redaction: JSON, size, secret keys.

Pure functions, no I/O. A key is secret when its normalised name contains one of the
configured redact keys (``db_password`` matches ``password``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .errors import PayloadNotSerializable, PayloadTooLarge

#: Stored in place of a redacted value.
REDACTED = "[redacted]"


def is_secret_key(key: object, redact_keys: Iterable[str]) -> bool:
    if not isinstance(key, str):
        return False
    name = key.lower().replace("-", "_")
    return any(k in name for k in redact_keys)


def redact(value: Any, redact_keys: Sequence[str]) -> Any:
    """A copy of ``value`` with every value under a secret key replaced by ``REDACTED``."""
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if is_secret_key(k, redact_keys) else redact(v, redact_keys))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v, redact_keys) for v in value]
    return value


def secret_values(value: Any, redact_keys: Sequence[str]) -> list[str]:
    """Every string (or number) found under a secret key, each once, to mask them in
    messages."""
    found: list[str] = []

    def walk(node: Any, secret: bool) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, secret or is_secret_key(k, redact_keys))
        elif isinstance(node, list | tuple):
            for v in node:
                walk(v, secret)
        elif secret and isinstance(node, str | int | float) and not isinstance(node, bool):
            text = str(node)
            if len(text) >= 3:
                found.append(text)

    walk(value, False)
    return list(dict.fromkeys(found))  # each once, in order


def encode_payload(args: Sequence[Any], kwargs: Mapping[str, Any], max_bytes: int) -> int:
    """Check the call's arguments are JSON and within the size limit; return their size.

    Raises:
        PayloadNotSerializable: an argument is not JSON-serialisable.
        PayloadTooLarge: the encoded arguments exceed ``max_bytes``.
    """
    try:
        encoded = json.dumps(
            {"args": list(args), "kwargs": dict(kwargs)}, allow_nan=False, separators=(",", ":")
        )
    except (TypeError, ValueError) as exc:
        raise PayloadNotSerializable(f"arguments are not JSON-serialisable: {exc}") from None
    size = len(encoded.encode("utf-8"))
    if size > max_bytes:
        raise PayloadTooLarge(
            f"arguments are {size} bytes encoded, over the limit of {max_bytes} "
            "(tracked_max_payload_bytes); pass identifiers, keep large content in storage"
        )
    return size


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)
