"""Payload checks, redaction and masking: JSON, size, secret keys, credentials in URLs,
safe error summaries. The one home of masking: nothing else hides a secret.

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

:class:`Redaction` is the app's masking by name as one value (its keys, on or off), made
once from the settings (``Settings.masking``) and handed to the places that mask; its
methods are the functions below given its keys.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, time
from decimal import Decimal
from typing import Any

from .codec import PAYLOAD_DEPTH, encode
from .errors import PayloadNotSerializable, PayloadTooLarge
from .printable import storable

#: Stored in place of a redacted value.
REDACTED = "[redacted]"
#: Stands for masked text (URL credentials, a secret value in a message).
MASK = "***"
#: Longest error summary ever stored or logged.
MAX_SUMMARY_CHARS = 500
#: Keys shorter than this match whole words only.
_SUBSTRING_MIN = 5
#: A secret value shorter than this (a 2-digit PIN, a 1-letter answer) is masked where it
#: stands alone (between non-alphanumerics), not inside every word that holds it: the
#: text stays readable, and those characters inside a longer word tell nothing.
SHORT_SECRET = 3
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


def is_secret_key(key: object, keys: Iterable[str]) -> bool:
    if not isinstance(key, str):
        return False
    name = normalise_key(key)
    return any(key_matches(normalise_key(k), name) for k in keys)


def redact(value: Any, keys: Sequence[str]) -> Any:
    """A copy of ``value`` with every value under a secret key replaced by ``REDACTED``
    and the credentials of URLs in strings masked."""
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if is_secret_key(k, keys) else redact(v, keys)) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v, keys) for v in value]
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
        if password:
            found.append(password)
    return found


def secret_values(value: Any, keys: Sequence[str]) -> list[str]:
    """Every string (or number) found under a secret key, and every credential inside a
    URL, each once, to mask them in messages."""
    found: list[str] = []

    def walk(node: Any, secret: bool) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, secret or is_secret_key(k, keys))
        elif isinstance(node, list | tuple):
            for v in node:
                walk(v, secret)
        elif secret and isinstance(node, _SCALARS) and not isinstance(node, bool):
            texts = [str(node), node.hex] if isinstance(node, uuid.UUID) else [str(node)]
            found.extend(text for text in texts if text)
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


# user-info runs to the last "@" of the URL token: passwords may hold "/" or "@"
#: A scheme starts where no scheme character precedes it and is read possessively, and the
#: user-info is at most 512 characters: linear in the text's length (a long run of letters
#: costs one pass, never a search from each of its characters).
_URL_CREDENTIALS = re.compile(
    r"(?<![a-zA-Z0-9+.\-])(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*+://)(?P<creds>\S{1,512})@"
)


def mask_url(text: str) -> str:
    """Replace the user-info part of every URL in ``text`` by ``***``."""
    if "@" not in text:  # no user-info: skip the scan (up to 512 characters per "://")
        return text
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)


def url_userinfo(text: str) -> list[str]:
    """The user-info part (``user:password``) of every URL in ``text``."""
    if "@" not in text:
        return []
    return [m.group("creds") for m in _URL_CREDENTIALS.finditer(text)]


#: ``key=value``, ``key: value``, ``"key": "value"`` (and ``Authorization: Bearer x``). The
#: key must start a word and every quantifier is possessive: linear in the text's length
#: (a long run of word characters costs one pass, never a backtracking search).
_PAIR = re.compile(
    r"(?<![\w\-])(?P<key>[\w\-]++)(?P<sep>['\"]?+\s*+[:=]\s*+['\"]?+)"
    r"(?P<value>(?:(?:bearer|basic|token|digest|negotiate)\s++(?=[^\s'\",;&}]))?+"
    r"(?![{\[(])[^\s'\",;&}]++)",
    re.IGNORECASE,
)


def _mask_pairs(text: str, keys: Sequence[str]) -> str:
    """``text`` with the value of every ``key=value`` pair under a secret key masked."""

    def mask(match: re.Match[str]) -> str:
        key = match.group("key")
        if normalise_key(key) in NOT_SECRET_NAMES or not is_secret_key(key, keys):
            return match.group(0)
        return f"{key}{match.group('sep')}{MASK}"

    return _PAIR.sub(mask, text)


@functools.lru_cache(maxsize=1024)
def escaped_forms(value: str) -> tuple[str, ...]:
    """``value`` and the forms it takes inside a text: the body of its ``repr``, ``ascii``
    and JSON, and each of those escaped once more (a repr of a message holding a repr,
    as Celery's ``MaxRetriesExceededError`` shows ``args:(...)``). A value no escaping
    changes has one form."""
    once = {value, repr(value)[1:-1], ascii(value)[1:-1], json.dumps(value)[1:-1]}
    once.add(json.dumps(value, ensure_ascii=False)[1:-1])
    twice = {repr(form)[1:-1] for form in once} | {json.dumps(form)[1:-1] for form in once}
    return tuple(dict.fromkeys(form for form in (value, *once, *twice) if form))


def mask_secrets(text: str, secrets: Iterable[str] = (), keys: Iterable[str] = ()) -> str:
    """Mask URL credentials, ``key=value`` pairs under secret keys, and known secret values
    (in their escaped forms too: :func:`escaped_forms`)."""
    text = mask_url(text)
    forms = {form for s in secrets if s for form in escaped_forms(s)}
    for value in sorted(forms, key=len, reverse=True):
        if len(value) >= SHORT_SECRET:
            text = text.replace(value, MASK)
        else:  # 1-2 characters: where it stands alone, not inside every word holding it
            text = re.sub(rf"(?<![^\W_]){re.escape(value)}(?![^\W_])", MASK, text)
    secret_keys = tuple(k for k in keys if k.strip("*"))
    return _mask_pairs(text, secret_keys) if secret_keys else text


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (a 400-digit number is not worth echoing
    whole in an error message)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def safe_text(value: object) -> str:
    """``str(value)``, or a placeholder naming its type when its ``__str__`` raises."""
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def first_line(text: object, fallback: str = "") -> str:
    """The first non-empty line of ``text`` (an exception: its message, see
    :func:`safe_text`) with URL credentials masked (``fallback`` if none). Never raises."""
    lines = mask_url(safe_text(text)).strip().splitlines()
    return lines[0] if lines else fallback


def summarize(exc: BaseException, secrets: Iterable[str] = (), keys: Iterable[str] = ()) -> str:
    """A safe one-line summary: the first line of the message, secrets masked, no traceback.
    An exception whose ``__str__`` raises is summarised by its type. Never raises."""
    summary = storable(mask_secrets(first_line(exc), secrets, keys))
    if len(summary) > MAX_SUMMARY_CHARS:
        summary = summary[: MAX_SUMMARY_CHARS - 1] + "…"
    return summary


def error_type(exc: BaseException) -> str:
    """The exception's class name, as stored in ``background_jobs.error_type`` (the first
    public class of its hierarchy: internal subclasses, named with a leading underscore or
    marked ``internal = True``, never leak their names)."""
    for cls in type(exc).__mro__:
        if not cls.__name__.startswith("_") and not cls.__dict__.get("internal", False):
            return cls.__name__
    return type(exc).__name__


def _masked(value: Any, secrets: Sequence[str], keys: Sequence[str]) -> Any:
    """``value`` (an exception argument or note) with secrets masked: strings by
    :func:`mask_secrets`, containers copied with values under secret keys redacted."""
    if isinstance(value, str):
        return mask_secrets(value, secrets, keys)
    if isinstance(value, Mapping | list | tuple):
        cleaned = redact(value, keys)
        items = cleaned.items() if isinstance(cleaned, Mapping) else enumerate(cleaned)
        for k, v in list(items):
            cleaned[k] = _masked(v, secrets, keys)
        return tuple(cleaned) if isinstance(value, tuple) else cleaned
    return value


def _linked(exc: BaseException) -> list[BaseException]:
    """The exceptions ``exc`` shows with it: its chain, a ``Retry``'s cause, a group's
    members."""
    linked = [getattr(exc, "exc", None), exc.__cause__, exc.__context__]
    linked.extend(getattr(exc, "exceptions", None) or ())
    return [e for e in linked if isinstance(e, BaseException)]


def mask_exception(exc: BaseException, secrets: Sequence[str], keys: Sequence[str]) -> None:
    """Mask secrets in the text of ``exc`` and of everything shown with it (``__cause__``,
    ``__context__``, an ``ExceptionGroup``'s members, ``__notes__``), in place, so Celery's
    logs, events and result backend never show them: string arguments, containers among
    the arguments (values under secret keys redacted), and text copies some exceptions
    keep (Celery's ``Retry.excs``/``message``). Never raises."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        with contextlib.suppress(Exception):
            current.args = tuple(_masked(a, secrets, keys) for a in current.args)
        for attr in ("excs", "message", "__notes__"):
            text = getattr(current, attr, None)
            if isinstance(text, str | list):
                with contextlib.suppress(Exception):
                    setattr(current, attr, _masked(text, secrets, keys))
        pending.extend(_linked(current))


@dataclass(frozen=True)
class Redaction:
    """What is masked by name: the keys of ``tracked_redact_keys`` while ``on``
    (``tracked_redaction``; off: no name is secret, only URL credentials are masked)."""

    keys: tuple[str, ...] = ()
    on: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys) if self.on else ())

    def is_secret(self, key: object) -> bool:
        """Whether ``key`` names a secret (:func:`is_secret_key`)."""
        return is_secret_key(key, self.keys)

    def redact(self, value: Any) -> Any:
        """:func:`redact`: a copy with the values under secret keys ``REDACTED``."""
        return redact(value, self.keys)

    def secret_values(self, value: Any) -> list[str]:
        """:func:`secret_values`: the values to mask in messages."""
        return secret_values(value, self.keys)

    def mask(self, text: str, secrets: Iterable[str] = ()) -> str:
        """:func:`mask_secrets`: ``text`` with URL credentials, pairs under secret keys and
        ``secrets`` masked."""
        return mask_secrets(text, secrets, self.keys)

    def summarize(self, exc: BaseException, secrets: Iterable[str] = ()) -> str:
        """:func:`summarize`: the masked one-line summary of ``exc``."""
        return summarize(exc, secrets, self.keys)

    def mask_exception(self, exc: BaseException, secrets: Sequence[str] = ()) -> None:
        """:func:`mask_exception`: ``exc`` and what is shown with it masked, in place."""
        mask_exception(exc, secrets, self.keys)


#: No name is secret (only credentials in URLs are masked): the default where no settings
#: apply (a successor's message has no caller's reprs; a key built for a limit).
NO_KEYS = Redaction()
