"""What the services need of the idempotency guard and of terminal notifications, as
Protocols: the Redis and in-memory implementations are in ``guard.py`` (the backends).
No I/O here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


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
