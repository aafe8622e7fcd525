"""Sealed arguments: the values under redacted names, stored encrypted beside the row's
redacted payload (``background_jobs.secrets_sealed``), so that the relay, the reaper and
``Tracker.retry`` can send a job's message again as it was called.

Opt-in: ``tracked_secret_key`` (one Fernet key, or several for rotation: the first
encrypts, every one decrypts; ``cryptography``'s ``MultiFernet``, the ``secrets`` extra).
Without a key nothing is sealed, and a row whose payload holds redacted values cannot be
sent again from the row alone (:func:`unsendable`).

What is sealed: each top-level argument whose stored (redacted) value holds a redacted
value (the marker, or a URL whose credentials were masked), whole, by position (``args``)
or name (``kwargs``), in the payload's JSON form (kombu's, its types kept), encrypted and
authenticated (Fernet: AES-128-CBC + HMAC-SHA256).
Opening it back (:func:`unsealed`) puts those arguments in place of the stored ones; a row
no key here can open (a key rotated away, another app's key, no key set) raises
:class:`SealBroken`, and the job is ended with that reason, never sent with the marker;
but a process with no key at all (:class:`NoKeyHere`) leaves it to one that has a key.
Knows nothing of Celery or SQL.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.codec import PAYLOAD_DEPTH, decode, encode
from ..core.errors import ConfigurationError
from ..core.jobs import Job
from ..core.redact import MASK, REDACTED, holds_redacted

#: The extra that brings ``cryptography``.
EXTRA = "celery-tracked[secrets]"


class SealBroken(Exception):
    """A row's sealed arguments cannot be opened here (internal: the relay and the reaper
    end the job with its text, ``Tracker.retry`` raises ``RetryRefused``). The text names
    the job and the cause, never a key or a value."""


class NoKeyHere(SealBroken):
    """A row's arguments are sealed and this process has no ``tracked_secret_key`` at all
    (an ops host running ``tracked reap``, a Beat or relay process): the relay and the
    reaper here leave the job alone, for a keyed process to send it again."""


#: Said (once per pass) by a relay or reaper that left sealed jobs to a keyed process.
NO_KEY_HERE = "this process has no tracked_secret_key: a process with the key sends them again"


class Sealer:
    """Encrypts and decrypts with the keys of ``tracked_secret_key`` (``MultiFernet``)."""

    def __init__(self, keys: Sequence[str]) -> None:
        try:
            from cryptography.fernet import Fernet, InvalidToken, MultiFernet
        except ImportError:
            raise ConfigurationError(
                "tracked_secret_key",
                f"is set, but the cryptography package is not installed: pip install "
                f"'{EXTRA}' (or unset tracked_secret_key)",
            ) from None
        self._fernet = MultiFernet([Fernet(key.encode("ascii")) for key in keys])
        self._invalid = InvalidToken

    def seal(self, value: Any) -> str:
        """``value`` in the payload's JSON form, encrypted with the first key."""
        return self._fernet.encrypt(encode(value, PAYLOAD_DEPTH).encode()).decode("ascii")

    def open(self, token: str) -> Any:
        """The value :meth:`seal` sealed. Raises ``ValueError`` if no key opens it."""
        try:
            return decode(self._fernet.decrypt(token.encode("ascii")).decode())
        except (self._invalid, UnicodeError) as exc:
            raise ValueError("none of the keys of tracked_secret_key decrypts it") from exc


@functools.cache
def sealer_for(keys: tuple[str, ...]) -> Sealer | None:
    """The process's sealer for ``keys`` (None: no key, nothing sealed)."""
    return Sealer(keys) if keys else None


def seal_call(
    sealer: Sealer | None, args: Sequence[Any], kwargs: Mapping[str, Any], payload_json: str
) -> str | None:
    """The sealed form of a call's arguments whose stored value (``payload_json``, the
    redacted payload) holds a redacted value; None without a key or without such one."""
    if sealer is None or not _may_hold(payload_json):
        return None
    stored = decode(payload_json)
    hidden_args = {
        str(index): value
        for index, (value, safe) in enumerate(zip(args, stored["args"], strict=False))
        if holds_redacted(safe)
    }
    hidden_kwargs = {
        name: kwargs[name]
        for name, safe in stored["kwargs"].items()
        if name in kwargs and holds_redacted(safe)
    }
    if not hidden_args and not hidden_kwargs:
        return None
    return sealer.seal({"args": hidden_args, "kwargs": hidden_kwargs})


def needs_seal(payload_json: str, sealed: str | None) -> bool:
    """A new job's payload holds redacted values that were not sealed (no key): its row
    alone could not rebuild its message (``enqueue_in`` refuses such a call)."""
    return sealed is None and _may_hold(payload_json) and holds_redacted(decode(payload_json))


def _may_hold(payload_json: str) -> bool:
    """The cheap test first: a payload without the marker nor a masked URL's ``***`` lost
    nothing to redaction (:func:`~celery_tracked.core.redact.holds_redacted`)."""
    return REDACTED in payload_json or MASK in payload_json


def unsendable_call(payload_json: str, sealed: str | None) -> bool:
    """A new job's row could not rebuild its message (:func:`unsendable`): its stored
    ``payload_json`` lost values to redaction and nothing was ``sealed``."""
    return sealed is None and _may_hold(payload_json) and holds_redacted(decode(payload_json))


def unsendable(job: Job) -> bool:
    """The row alone cannot rebuild ``job``'s message: its payload holds redacted values
    and nothing was sealed (no ``tracked_secret_key`` when it was created)."""
    return job.secrets_sealed is None and holds_redacted(job.payload)


def unsealed(job: Job, sealer: Sealer | None) -> tuple[list[Any], dict[str, Any]]:
    """``job``'s arguments as called: the stored ones, the sealed ones put back.

    Raises:
        SealBroken: the row is sealed, and no key here opens it.
    """
    payload = job.payload or {}
    args, kwargs = list(payload.get("args", ())), dict(payload.get("kwargs", {}))
    if job.secrets_sealed is None:
        return args, kwargs
    if sealer is None:
        raise NoKeyHere(
            f"job {job.id}: its redacted arguments are stored encrypted, but "
            "tracked_secret_key is not set in this process, so it cannot be sent again"
        )
    try:
        hidden = sealer.open(job.secrets_sealed)
    except ValueError:
        raise SealBroken(
            f"job {job.id}: none of the keys of tracked_secret_key decrypts its redacted "
            "arguments (a key rotated away, or another app's key), so it cannot be sent "
            "again as called: run it again with tracker.retry(job_id, arguments={...the "
            "redacted ones...}), or enqueue it again"
        ) from None
    for index, value in hidden.get("args", {}).items():
        if int(index) < len(args):
            args[int(index)] = value
    kwargs.update(hidden.get("kwargs", {}))
    return args, kwargs


def keyless(job: Job, sealer: Sealer | None) -> bool:
    """``job``'s arguments are sealed and this process has no key to open them: only a
    keyed process may send it again or give it up (a process whose keys all fail may)."""
    return job.secrets_sealed is not None and sealer is None


def broken_seal(job: Job, sealer: Sealer | None) -> str | None:
    """Why ``job`` cannot be sent again from its row (its text), or None if it can."""
    try:
        unsealed(job, sealer)
    except SealBroken as exc:
        return str(exc)
    return None
