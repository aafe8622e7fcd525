"""Circuit breakers, pure: a task's circuit options, a circuit's state as read from its
row, and which errors count against it.

``@tracked_task(circuit="stripe")`` names a circuit shared by every worker and every task
naming it: one row of ``background_job_circuits`` (``closed``, ``open``, ``half_open``),
each change one conditional ``UPDATE`` on the database's clock (``store/circuits.py``).
A counted failure while ``closed`` adds to the failures of the current window; the
``circuit_threshold``-th within ``circuit_window_s`` opens it for ``circuit_cooldown_s``.
While ``open`` its deliveries are held in the database (no attempt used, no message:
``locked_by = 'circuit:<name>'``); after the cool-down the circuit pass
(``services/circuits.py``) moves it to ``half_open`` and publishes one held job, the probe:
its success closes the circuit and releases the held jobs (oldest first), its counted
failure opens it again. An operator may open one by hand (held until closed by hand).

Counted: an exception of ``circuit_errors`` (default every ``Exception``) that is not one
of ``circuit_ignore`` (default ``ValueError``, ``TypeError``: bad input), never a
:class:`~celery_tracked.errors.TrackedError` (``Unrecoverable``, a refused payload) nor
the framework's control signals (Celery's ``Retry``/``Ignore``/``Reject``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from .errors import InvalidTaskOption, TrackedError
from .redact import short_repr
from .validation import Bound, check_number

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
STATES = (CLOSED, OPEN, HALF_OPEN)
#: ``locked_by`` of a waiting row an open circuit holds: this prefix and the circuit's name
HELD_BY_CIRCUIT = "circuit:"
#: The task options of a circuit.
CIRCUIT_OPTIONS = (
    "circuit",
    "circuit_threshold",
    "circuit_window_s",
    "circuit_cooldown_s",
    "circuit_errors",
    "circuit_ignore",
)
_LONGEST_NAME = 255 - len(HELD_BY_CIRCUIT)
_COUNT = Bound(1, 1_000_000)
_SECONDS = Bound(0.1, 7 * 24 * 3600.0)


def held_by(name: str) -> str:
    """The ``locked_by`` of a row the circuit ``name`` holds."""
    return HELD_BY_CIRCUIT + name


@dataclass(frozen=True)
class CircuitRule:
    """A task's circuit: its name, thresholds and which errors count (module text)."""

    name: str
    threshold: int = 5
    window_s: float = 60.0
    cooldown_s: float = 30.0
    errors: tuple[type[BaseException], ...] = (Exception,)
    ignore: tuple[type[BaseException], ...] = (ValueError, TypeError)

    def counts(self, error: BaseException | None) -> bool:
        """Whether ``error`` (None: none) counts as a failure of the circuit."""
        if error is None or isinstance(error, TrackedError):
            return False
        return isinstance(error, self.errors) and not isinstance(error, self.ignore)


def _classes(option: str, value: Any) -> tuple[type[BaseException], ...]:
    found = tuple(value) if isinstance(value, tuple | list) else (value,)
    if not all(isinstance(k, type) and issubclass(k, BaseException) for k in found):
        raise InvalidTaskOption(
            option, f"an exception class or a tuple of them, not {short_repr(value)}"
        )
    return found


def circuit_rule(options: Mapping[str, Any]) -> CircuitRule | None:
    """The circuit the task ``options`` declare (None: no ``circuit``).

    Raises:
        InvalidTaskOption: a bad name, number or error class; a threshold option without
            ``circuit``.
    """
    name = options.get("circuit")
    if name is None:
        given = [o for o in CIRCUIT_OPTIONS[1:] if options.get(o) is not None]
        if given:
            raise InvalidTaskOption(given[0], "given without circuit='name'")
        return None
    if not isinstance(name, str) or not name.strip() or len(name) > _LONGEST_NAME:
        raise InvalidTaskOption(
            "circuit", f"a name of 1 to {_LONGEST_NAME} characters, not {short_repr(name)}"
        )
    found: dict[str, Any] = {}
    for option, field, bound, integer in (
        ("circuit_threshold", "threshold", _COUNT, True),
        ("circuit_window_s", "window_s", _SECONDS, False),
        ("circuit_cooldown_s", "cooldown_s", _SECONDS, False),
    ):
        value = options.get(option)
        if value is not None:
            check_number(option, value, bound, integer, "")
            found[field] = value
    for option, field in (("circuit_errors", "errors"), ("circuit_ignore", "ignore")):
        if options.get(option) is not None:
            found[field] = _classes(option, options[option])
    return CircuitRule(name, **found)


@dataclass(frozen=True)
class Circuit:
    """One circuit as its row says: state, the failures of the current window, when it
    opened (and until when it cools down), who opened it by hand and why, its probe, and
    its history (times opened, probes sent, when it last closed); every time is the
    database's clock."""

    name: str
    state: str = CLOSED
    failures: int = 0
    window_started_at: datetime | None = None
    opened_at: datetime | None = None
    reopen_at: datetime | None = None
    opened_by: str | None = None
    reason: str | None = None
    probe_job_id: str | None = None
    probe_until: datetime | None = None
    opened_count: int = 0
    probes: int = 0
    closed_at: datetime | None = None
    updated_at: datetime | None = None
    #: how many jobs it holds now (``Tracker.circuits``; not a column)
    held: int = 0

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Circuit:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__ if name in row})

    @property
    def manual(self) -> bool:
        """Opened by hand: held until closed by hand."""
        return self.state == OPEN and self.opened_by is not None

    def probe_free(self, now: datetime) -> bool:
        """Half-open with no probe running (none taken, or its time ran out at ``now``)."""
        if self.state != HALF_OPEN:
            return False
        return self.probe_job_id is None or (
            self.probe_until is not None and self.probe_until < now
        )

    def describe(self) -> str:
        """``circuit 'stripe' open since ...: why``."""
        since = f" since {self.opened_at.isoformat()}" if self.opened_at else ""
        if self.state == CLOSED:
            return f"circuit {self.name!r} closed"
        by = f" by {self.opened_by}" if self.opened_by else ""
        why = f": {self.reason}" if self.reason else ""
        return f"circuit {self.name!r} {self.state.replace('_', '-')}{by}{since}{why}"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            out[name] = value.isoformat() if isinstance(value, datetime) else value
        return out


class CircuitMoves(Protocol):
    """The circuit breakers' own store methods (``ports.CircuitStore`` adds the relay's:
    ``store/circuits.py``)."""

    def circuit(self, name: str) -> Circuit | None: ...

    def circuits(self) -> list[Circuit]: ...

    def circuit_failed(self, rule: CircuitRule, reason: str) -> Circuit | None: ...

    def half_open(self, name: str) -> bool: ...

    def take_probe(self, name: str, job_id: str, *, lease_s: float) -> bool: ...

    def probe_ended(self, rule: CircuitRule, job_id: str, failed: str | None) -> bool: ...

    def by_hand(self, name: str, opened_by: str | None, reason: str | None) -> bool: ...

    def circuit_held(self, name: str, limit: int = 100) -> list[str]: ...

    def probe_claim(self, job_id: str, circuit: str, owner: str, lease_s: float) -> bool: ...

    def probe_sent(self, job_id: str, owner: str, revision: int, message: str) -> bool: ...
