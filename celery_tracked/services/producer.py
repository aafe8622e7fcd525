"""The producer: one call of a described task turned into its job, then enqueued.

:class:`Producer` is the one producer path of ``enqueue``/``apply_async``/``apply`` and of
``Tracker.enqueue`` (by name): given the task's description, the facts of the call
(:class:`CallFacts`, which the adapter gathers from Celery once: ``adapter/calls.py``), the
arguments and the adapter's ``send``, it makes the :class:`NewJob` (the call prepared and
checked, ``calls.py``; the queue, ``TaskDescription.queue``; the task's attempts and key
lifetime; a debounce's delay) and hands it to the :class:`~.enqueuer.Enqueuer` with its
message (:class:`Message`): ``send`` is the one call back into the adapter. A step's
successors (``pipelines.py``) and ``enqueue_in`` (``transactional.py``) make their jobs
with :func:`new_job` too. Knows nothing of Celery: the ids, the lineage and the publish
are given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Protocol

from ..core.calls import PreparedCall, prepare_call
from ..core.deadlines import NO_DEADLINE, Deadline, check_deadline, deadline_of, held
from ..core.description import TaskDescription
from ..core.jobs import EnqueueResult, JobStatus, utcnow
from ..core.keys import KeyRule
from ..core.messages import Control, TrackedHeaders, check_text
from ..core.redact import NO_KEYS, Redaction
from ..core.settings import Settings
from .sealing import seal_call, sealer_for, unsendable_call

#: The guard of a job without key but with a given task id covers the enqueue only.
ID_GUARD_TTL_MS = 60_000
_ONE_JOB = KeyRule()


@dataclass(frozen=True)
class NewJob:
    """Everything the producer needs to create one job."""

    job_id: str
    task_name: str
    job_type: str
    #: the queue the message goes to (also ``queue_name`` of the row)
    queue: str
    call: PreparedCall
    max_attempts: int
    #: shared by a job and every job enqueued from inside it
    correlation_id: str
    parent_job_id: str | None
    owner_id: str | None
    #: the message's task id when it is not the job id (a ``self.replace`` replacement)
    celery_task_id: str | None = None
    #: sent as part of a Celery canvas: a duplicate is refused (``DuplicateInCanvas``)
    canvas: bool = False
    #: the task's key lifetime (``keys.py``)
    key_rule: KeyRule = _ONE_JOB
    #: the jobs sharing it run at most the task's limit at once (``limits.py``)
    concurrency_key: str | None = None
    #: its concurrency key's slots go round-robin by it (``limits.py``)
    fairness_key: str | None = None
    #: the id was made for this call (no task id given): nobody else can hold it
    fresh_id: bool = False
    sealed: str | None = None  #: the redacted values, encrypted (``sealing.py``)
    #: the message's ``countdown`` (seconds): the row is due that long after its insert,
    #: on the database's clock (``not_before``)
    due_in_s: float | None = None
    #: the message's ``eta`` (UTC): the row is due then (``not_before``)
    due_at: datetime | None = None
    #: the message's priority (the call's, else the task's; None: the broker's default)
    priority: int | None = None
    #: its deadline (``deadline_at``): seconds after the insert (database clock) or a time
    deadline: Deadline = NO_DEADLINE
    #: a job due further ahead is held in the database (``tracked_schedule_horizon_seconds``)
    horizon_s: float = 300.0
    #: the call gives Celery's ``expires``: only its message carries it (never held)
    expires: bool = False

    @property
    def rule(self) -> KeyRule:
        """The key lifetime that applies: a job without key is only ever itself."""
        return self.key_rule if self.call.key is not None else _ONE_JOB

    def headers(self) -> TrackedHeaders:
        return TrackedHeaders(self.job_id, self.correlation_id, self.parent_job_id, self.queue)

    def row(self, key_round: int = 0, now: datetime | None = None) -> dict[str, object]:
        """The new row, created at ``now`` (the database's clock under a timed key rule)."""
        now = now or utcnow()
        return {
            "id": self.job_id,
            "queue_name": self.queue,
            "job_type": self.job_type,
            "task_name": self.task_name,
            "celery_task_id": self.celery_task_id or self.job_id,
            "status": JobStatus.PENDING.value,
            "payload_json": self.call.payload_json,
            "max_attempts": self.max_attempts,
            "idempotency_key": self.call.key,
            "key_round": key_round,
            "revision": 0,
            "correlation_id": self.correlation_id,
            "parent_job_id": self.parent_job_id,
            "owner_id": self.owner_id,
            "concurrency_key": self.concurrency_key,
            "fairness_key": self.fairness_key,
            "tenant": self.call.tenant,
            "secrets_sealed": self.sealed,
            "created_at": now,
            "updated_at": now,
            "due_in_s": self.due_in_s,
            "due_at": self.due_at,
            "priority": self.priority,
            "deadline_in_s": self.deadline.in_s,
            "deadline_at": self.deadline.at,
        }

    @property
    def held(self) -> bool:
        """Due further ahead than the horizon: created without a message, published by
        the scheduler pass as it comes due (``deadlines.held``). Never one whose redacted
        arguments were not sealed (no ``tracked_secret_key``), nor one with Celery's
        ``expires``: only its own message carries them, so it is published now with its
        countdown, as Celery does."""
        if self.expires or not held(self.due_in_s, self.due_at, self.horizon_s, utcnow()):
            return False
        return not unsendable_call(self.call.payload_json, self.sealed)


def guard_of(job: NewJob, guard_ttl_s: int) -> tuple[tuple[str, ...], int] | None:
    """The guard key's parts and its TTL (ms): per ``(job_type, key)`` for the key's
    lifetime (at most ``guard_ttl_s``; a throttle's window), else per job id for the
    enqueue itself (an explicit ``task_id`` given twice is one job); None for a job
    without key whose id was made for this call (its primary key is guard enough)."""
    if job.call.key is not None:
        return ("guard", job.job_type, job.call.key), job.rule.guard_ttl_ms(guard_ttl_s * 1000)
    if job.fresh_id:
        return None
    return ("guard", "id", job.job_id), min(ID_GUARD_TTL_MS, guard_ttl_s * 1000)


@dataclass(frozen=True)
class CallFacts:
    """What one call is, beside its arguments: its ids, whether a canvas sent it, its
    lineage, the caller's control options and Celery's options; gathered once by the
    adapter (``adapter/calls.py``), or made for a successor (``pipelines.py``)."""

    job_id: str
    #: the message's task id (the job id; the replacer's for a ``self.replace`` replacement)
    sent_as: str | None
    #: sent as part of a Celery canvas: a duplicate is refused (``DuplicateInCanvas``)
    in_canvas: bool
    #: the lineage, resolved: given, or inherited from the calling task
    parent_job_id: str | None
    correlation_id: str
    #: the caller's control options (its key, owner and attempts are read here)
    control: Control
    #: Celery's options of the message (``countdown``, ``eta``, ``queue``...); the job's
    #: making adds the queue the task pins and a debounce's delay
    options: dict[str, Any]
    #: the job id was made for this call (no task id was given)
    fresh: bool = False


def new_job(
    task: TaskDescription,
    settings: Settings,
    facts: CallFacts,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> NewJob:
    """The job a call of ``task`` creates; ``facts.options`` (the message's) get the queue
    the task pins, its priority and a debounce's delay.

    Raises:
        InvalidPayload: (or a subclass: ``InvalidPriority``) the call was refused.
    """
    control, options = facts.control, facts.options
    rules = task.call_rules(settings.masking, settings.max_payload_bytes)
    correlated = control.correlation_id is not None or facts.correlation_id != facts.job_id
    call = prepare_call(task.shape, rules, args, kwargs, control.idempotency_key, correlated)
    task.limits.turns_of(task.shape, args, kwargs, strict=True)  # refused now, not at a start
    queue = check_text(task.queue(options, args, kwargs), "queue", 200)
    if "queue" not in options and task.pins_queue:
        options["queue"] = queue
    priority = task.priority_of(options, queue)  # InvalidPriority: out of the broker's range
    if priority is not None:
        options["priority"] = priority  # the row's and the message's, the same
    job = NewJob(
        job_id=facts.job_id,
        task_name=task.name,
        job_type=check_text(task.job_type, "job_type", 200),
        queue=queue,
        call=call,
        max_attempts=control.max_attempts or task.attempts(settings.default_attempts),
        correlation_id=facts.correlation_id,
        parent_job_id=facts.parent_job_id,
        owner_id=control.owner_id,
        celery_task_id=facts.sent_as,
        canvas=facts.in_canvas,
        key_rule=task.keys,
        concurrency_key=call.concurrency_key,
        fairness_key=call.fairness_key,
        fresh_id=facts.fresh,
        sealed=seal_call(sealer_for(settings.secret_key), args, kwargs, call.payload_json),
        priority=priority,
        horizon_s=settings.schedule_horizon_seconds,
    )
    debounce(job, options)
    job = due(job, options)
    name = control.deadline_name
    deadline = deadline_of(control.deadline, name) if control.deadline is not None else None
    if deadline is None and task.deadline_s is not None:
        deadline = Deadline(in_s=task.deadline_s)
        name = f"the task's deadline option of {task.name}"
    if deadline is not None:
        check_deadline(deadline, job.due_in_s, job.due_at, utcnow(), name)
        job = replace(job, deadline=deadline)
    return job


def due(job: NewJob, options: Mapping[str, Any]) -> NewJob:
    """``job`` due when its message is (``not_before``): after its ``countdown`` (counted on
    the database's clock from the insert; it wins over an ``eta``, as in Celery), else at
    its ``eta`` (a naive one read as UTC, as Celery reads it); noting Celery's ``expires``
    (never held). Checked by ``check_options``."""
    countdown, eta = options.get("countdown"), options.get("eta")
    job = replace(job, expires=options.get("expires") is not None)
    if countdown is not None:
        return replace(job, due_in_s=float(countdown))
    if isinstance(eta, str):
        eta = datetime.fromisoformat(eta)
    if isinstance(eta, datetime):
        at = eta if eta.tzinfo is not None else eta.replace(tzinfo=timezone.utc)
        return replace(job, due_at=at.astimezone(timezone.utc))
    return job


def debounce(job: NewJob, options: dict[str, Any]) -> None:
    """``debounce_s``: every enqueue of a keyed job pushes its start that much later,
    unless the call gives its own ``countdown``/``eta``."""
    delay = job.rule.debounce_s
    if delay and options.get("countdown") is None and options.get("eta") is None:
        options["countdown"] = delay


#: ``publish(headers, task_id)``: hand the job's message to the broker (or run it here).
Publish = Callable[[TrackedHeaders, str], object]
#: ``send(args, kwargs, options)``: the adapter's delivery of a message with Celery's
#: options (``task_id``, ``headers``, ``argsrepr``... : Celery's ``apply_async``).
Send = Callable[[tuple[Any, ...], dict[str, Any], dict[str, Any]], object]


@dataclass(frozen=True)
class Message:
    """The job's message, a :data:`Publish`: ``send`` given the arguments and the call's
    options, with the task id, the tracked headers (over the caller's own) and the
    ``argsrepr``/``kwargsrepr``: ours (redacted), or the caller's own, a redacted
    argument's value masked in it."""

    send: Send
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    call: PreparedCall
    options: Mapping[str, Any]
    redaction: Redaction = NO_KEYS

    def __call__(self, tracked: TrackedHeaders, task_id: str) -> object:
        options = dict(self.options)
        headers = {**(options.pop("headers", None) or {}), **tracked.to_headers()}
        argsrepr = self._shown(options.pop("argsrepr", None), self.call.argsrepr)
        kwargsrepr = self._shown(options.pop("kwargsrepr", None), self.call.kwargsrepr)
        message = dict(task_id=task_id, headers=headers, argsrepr=argsrepr, kwargsrepr=kwargsrepr)
        return self.send(self.args, dict(self.kwargs), {**options, **message})

    def _shown(self, given: object, ours: str) -> str:
        """The caller's text (masked), else ours."""
        if given is None:
            return ours
        return self.redaction.mask(str(given), self.call.secrets)


class Enqueues(Protocol):
    """What the producer hands its jobs to: the :class:`~.enqueuer.Enqueuer` (named by
    its method here, as ``enqueue.py`` imports this module's ``NewJob``)."""

    def enqueue(
        self, job: NewJob, publish: Publish, redaction: Redaction
    ) -> EnqueueResult[Any]: ...


class Producer:
    """Makes a call's job and enqueues it: the one producer path (module docstring)."""

    def __init__(self, enqueuer: Enqueues, settings: Settings) -> None:
        self.enqueuer = enqueuer
        self.settings = settings

    def new_job(
        self,
        task: TaskDescription,
        facts: CallFacts,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> NewJob:
        """:func:`new_job` under this app's settings."""
        return new_job(task, self.settings, facts, args, kwargs)

    def message(
        self,
        job: NewJob,
        facts: CallFacts,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        send: Send,
    ) -> Message:
        """``job``'s message, delivered by ``send`` (made after the job: its options then
        hold the queue and a debounce's delay)."""
        masking = self.settings.masking
        return Message(send, tuple(args), dict(kwargs), job.call, dict(facts.options), masking)

    def enqueue(
        self,
        task: TaskDescription,
        facts: CallFacts,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        send: Send,
        *,
        due_now: bool = False,
    ) -> EnqueueResult[Any]:
        """Create the call's job (or find its key's) and publish it through ``send``;
        ``due_now``: a run here at once (eager mode ignores a ``countdown``/``eta``).

        Raises:
            InvalidPayload: (or a subclass) the call was refused (nothing was created).
            EnqueueError: as ``Enqueuer.enqueue`` (nothing was created).
            Exception: what ``send`` raised as a ``PublishRefused`` (nothing was created).
        """
        job = self.new_job(task, facts, args, kwargs)
        if due_now:
            job = replace(job, due_in_s=None, due_at=None)
        publish = self.message(job, facts, args, kwargs, send)
        return self.enqueuer.enqueue(job, publish, self.settings.masking)
