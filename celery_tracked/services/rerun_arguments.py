"""The arguments ``Tracker.retry`` runs a job again with, read from its row (pure: no
Celery, no store): as stored, with the redacted ones given again (``retry_arguments``),
their reprs (``stored_reprs``), and the attempts its latest round was given
(``granted``). ``rerun.py`` makes the round."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..core.calls import Show, bounded_reprs, plain_repr
from ..core.codec import decode, encode
from ..core.errors import RetryRefused
from ..core.jobs import RETRY_UNDONE, Job
from ..core.redact import Redaction, holds_redacted


class Shape(Protocol):
    """What ``retry_arguments`` needs of a task's call shape (``calls.CallShape``)."""

    def names(self, count: int) -> list[str | None]: ...

    def redacted(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], redaction: Redaction
    ) -> tuple[list[Any], dict[str, Any]]: ...


class _Unnamed:
    """The call shape of a task this process does not know: its positional arguments have
    no names (a redacted one cannot be given again), its keyword arguments are redacted by
    their names as usual."""

    def names(self, count: int) -> list[str | None]:
        return [None] * count

    def redacted(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], redaction: Redaction
    ) -> tuple[list[Any], dict[str, Any]]:
        return list(args), redaction.redact(dict(kwargs))


def stored_arguments(job: Job) -> tuple[list[Any], dict[str, Any]]:
    """The job's arguments as stored (redacted values included)."""
    payload = job.payload or {}
    return list(payload.get("args", ())), dict(payload.get("kwargs", {}))


def stored_reprs(job: Job, show: Show = plain_repr) -> tuple[str, str]:
    """``argsrepr``/``kwargsrepr`` of ``job``'s message, from its row's redacted payload:
    what Flower and task events show, whoever publishes it (even a process that never
    imported the task); ``show`` is the platform's repr."""
    return bounded_reprs(*stored_arguments(job), show)


def granted(max_attempts: int, rounds: Sequence[tuple[str, int]]) -> int:
    """The attempts the job's latest round was given: ``max_attempts`` less the attempts
    made before that round began (at its enqueue: 0; at its latest retry not undone).
    ``rounds``: its ``retried``/``retry_undone`` events in order, with the attempts made
    before each."""
    starts = [0]
    for event, attempt in rounds:
        if event == RETRY_UNDONE:
            if len(starts) > 1:
                starts.pop()
        else:
            starts.append(attempt)
    return max(1, max_attempts - starts[-1])


def retry_arguments(
    job: Job, shape: Shape | None, given: Mapping[str, Any], redaction: Redaction
) -> tuple[list[Any], dict[str, Any]]:
    """The arguments ``job`` runs again with: as stored, with each top-level argument whose
    stored value holds a redacted value taken from ``given`` (by parameter name).

    Raises:
        RetryRefused: a redacted argument is missing from ``given``, ``given`` names an
            argument that was not redacted, or a given value differs from the stored one
            beyond its secret values.
    """
    args, kwargs = stored_arguments(job)
    known = shape is not None
    shape = shape if shape is not None else _Unnamed()
    names = shape.names(len(args))
    wanted: list[str] = []
    for index, (name, value) in enumerate(zip(names, args, strict=True)):
        if holds_redacted(value):
            wanted.append(name or f"<positional argument {index}>")
            if name is not None and name in given:
                args[index] = given[name]
    for name, value in kwargs.items():
        if holds_redacted(value):
            wanted.append(name)
            if name in given:
                kwargs[name] = given[name]
    missing = [name for name in wanted if name not in given]
    if missing:
        raise RetryRefused(
            f"job {job.id}: its stored arguments hold redacted values; pass them again: "
            f"tracker.retry(job_id, arguments={{...}}) with {', '.join(missing)}"
            + ("" if known else f" (and register task {job.task_name} here)")
        )
    extra = sorted(set(given) - set(wanted))
    if extra:
        raise RetryRefused(
            f"job {job.id} re-runs with its stored arguments; only redacted ones may be "
            f"given again ({', '.join(wanted) or 'none'}), not {', '.join(extra)}"
        )
    if wanted:
        safe_args, safe_kwargs = shape.redacted(args, kwargs, redaction)
        if decode(encode({"args": safe_args, "kwargs": safe_kwargs})) != job.payload:
            raise RetryRefused(
                f"job {job.id}: the values given differ from its stored arguments beyond "
                "their redacted parts"
            )
    return args, kwargs
