"""Tenants: the task options ``tenant`` and ``required``, checked at decoration, and what
they decide for one call. Pure: no Redis, SQL or Celery.

``tenant="{tenant_id}"`` (a ``str.format`` template over the call's arguments, like
``idempotency_key``, or a callable taking the call's arguments): the job's tenant, stored
in the ``tenant`` column (1-255 characters), filterable in ``Tracker.jobs(tenant=...)``
and ``celery tracked jobs --tenant``. The templates of ``idempotency_key``,
``concurrency_key`` and ``rate_limits`` may name it as ``{tenant}`` (an argument named
``tenant`` wins: it is then the argument's value).

``required=("tenant_id", "correlation_id", "idempotency_key")`` (seed 004's payload rule):
a call missing one is refused with :class:`~celery_tracked.errors.MissingRequired` before
anything is written (no row, no message, no guard key). A name is present when the call
gives that argument, not None and not empty; ``correlation_id`` is also present when the
call gives one (``correlation_id=``) or inherits one from the tracked job it is made in,
``idempotency_key`` when the job has a key (the task's template, or the call's
``idempotency_key=``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import InvalidTaskOption, MissingRequired

#: The tracked options of this module.
TENANT_OPTIONS = ("tenant", "required")
#: The names a template gives the job's tenant.
TENANT_FIELD = "tenant"


@dataclass(frozen=True)
class Tenancy:
    """A task's ``tenant`` template (or callable) and ``required`` names."""

    tenant: str | Callable[..., str] | None = None
    required: tuple[str, ...] = ()

    def check(
        self, task_name: str, named: Mapping[str, Any], keyed: bool, correlated: bool
    ) -> None:
        """Refuse a call missing a required name (``keyed``: the job has an idempotency
        key; ``correlated``: a correlation id, given or inherited).

        Raises:
            MissingRequired: names the missing names (never their values).
        """
        given = {"idempotency_key": keyed, "correlation_id": correlated}
        missing = [
            name
            for name in self.required
            if not given.get(name) and named.get(name) in (None, "", b"")
        ]
        if missing:
            raise MissingRequired(task_name, tuple(missing))


def tenancy_of(options: Mapping[str, Any]) -> Tenancy:
    """The ``tenant`` and ``required`` options, checked.

    Raises:
        InvalidTaskOption: names the option and what it must be.
    """
    tenant = options.get("tenant")  # its template is checked with the others (options.py)
    required = options.get("required")
    if required is None:
        return Tenancy(tenant)
    if isinstance(required, str) or not isinstance(required, Sequence) or not required:
        raise InvalidTaskOption("required", f"must be a tuple of argument names, got {required!r}")
    for name in required:
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidTaskOption("required", f"{name!r} is not an argument name")
    return Tenancy(tenant, tuple(required))


#: A task declaring neither option.
NO_TENANCY = Tenancy()
