"""What the services need of the idempotency guard and of terminal notifications, as
Protocols: the Redis and in-memory implementations are in ``guard.py`` (the backends).
No I/O here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .rates import Turn


class Guard(Protocol):
    def key(self, *parts: str) -> str:
        """The Redis key of ``parts`` (under the configured prefix)."""

    def acquire(self, key: str, token: str, ttl_ms: int) -> str | None:
        """Take ``key`` for ``token``; None when taken, else the current holder's token."""

    def release(self, key: str, token: str) -> bool:
        """Delete ``key`` only if ``token`` still holds it."""

    def holder(self, key: str) -> str | None: ...

    def release_all(self, entries: Iterable[tuple[str, str]]) -> int:
        """Delete each ``(key, token)`` whose key ``token`` still holds; how many went."""


class Notifier(Protocol):
    def publish(self, job_id: str, status: str) -> None: ...

    def subscribe(self, job_id: str) -> Subscription: ...


class Subscription(Protocol):
    def wait(self, timeout: float) -> bool:
        """Block until a notification arrives or ``timeout`` passes; True if one came."""

    def close(self) -> None: ...


class Limiter(Protocol):
    def take(self, name: str, interval_ms: int, reserved_ms: int | None) -> tuple[int, int]:
        """``(wait_ms, slot_ms)`` before the claim: 0 when the delivery may claim now."""

    def grant(self, name: str, interval_ms: int, slot_ms: int | None) -> int:
        """After the claim, just before the body, for the delivery of slot ``slot_ms``: 0
        when the start is granted (recorded), else the milliseconds until one may be."""

    def release(self, name: str, interval_ms: int, slot_ms: int) -> None:
        """The delivery of slot ``slot_ms`` runs nothing: its turn and what it is owed go."""

    def turns(self, turns: tuple[Turn, ...], grant: bool = True) -> tuple[int, tuple[Turn, ...]]:
        """Keyed rate limits (``rates.decide``, one round trip): ``(0, turns)`` when the
        start is granted (recorded on every key), else the wait and the turns with their
        places in line. ``grant`` False (before the claim): ``(0, turns)`` says there is
        room now, nothing recorded."""

    def free_in(self, turns: tuple[Turn, ...]) -> float:
        """Milliseconds until a fresh delivery of ``turns`` may be granted, by what this
        process last heard of their keys (0: nothing known); no round trip."""
