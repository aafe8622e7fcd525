"""``celery tracked call NAME``: enqueue a tracked job by its task's name
(``Tracker.enqueue``), as ``celery call`` sends a task, but tracked: the row, the guard,
the redaction of a decorated call. The task must be registered in the CLI's process
(``-A proj`` imports it, or the app's ``include``/``imports`` do).

Exit codes: 0 created or deduplicated; 1 no tracked task of that name here; 2 bad
``--args``/``--kwargs`` (a control keyword such as ``_idempotency_key`` among them), an
empty ``--idempotency-key``/``--correlation-id``, arguments the task refuses or options
Celery refuses (its ``ValueError``); 4 Redis, the database or the broker failed.
"""

from __future__ import annotations

import json
from typing import Any

import click
from celery.bin.base import CeleryCommand

from ..core.errors import InvalidPayload, UnknownTask
from ..core.messages import Control
from ..core.printable import visible
from ..core.redact import first_line
from .common import NotFound, check_text, emit_json, friendly, json_option, tracker_of
from .group import tracked


def _json(option: str, text: str | None, kind: type) -> Any:
    """``--args``/``--kwargs``: JSON of a list / an object."""
    if text is None:
        return kind()
    try:
        value = json.loads(check_text(option, text))
    except ValueError as exc:
        raise click.BadParameter(f"not JSON ({exc})", param_hint=option) from None
    if not isinstance(value, kind):  # never echoed: the text may hold a secret
        shown = "a JSON list" if kind is list else "a JSON object"
        got = type(value).__name__
        raise click.BadParameter(f"must be {shown}, got a JSON {got}", param_hint=option)
    return value


@tracked.command(cls=CeleryCommand)
@click.argument("name")
@click.option("--args", "args_json", metavar="JSON", help="Positional arguments: a JSON list.")
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Named arguments: a JSON object.")
@click.option("--idempotency-key", help="The call's idempotency key (taken literally).")
@click.option("--correlation-id", help="The job's correlation id.")
@json_option
@click.pass_context
def call(
    ctx: click.Context,
    name: str,
    args_json: str | None,
    kwargs_json: str | None,
    idempotency_key: str | None,
    correlation_id: str | None,
    as_json: bool,
) -> None:
    """Enqueue a job of the tracked task NAME, as a decorated call does (row, idempotency
    guard, redaction); prints its id, status and whether it was created or an existing
    job (deduplicated by its key)."""
    args = _json("--args", args_json, list)
    kwargs = _json("--kwargs", kwargs_json, dict)
    _no_control(kwargs)
    check_text("NAME", name)
    control = {"_idempotency_key": idempotency_key, "_correlation_id": correlation_id}
    tracker = tracker_of(ctx)
    with friendly("enqueue"):
        try:
            queued = tracker.enqueue(name, *args, **{**kwargs, **_given(control)})
        except UnknownTask as exc:
            raise NotFound(str(exc)) from None
        except InvalidPayload as exc:
            raise click.UsageError(visible(str(exc))) from None
        except ValueError as exc:  # Celery refusing the task's options (time limits...)
            raise click.UsageError(visible(first_line(str(exc), type(exc).__name__))) from None
    if as_json:
        emit_json(
            {"job_id": queued.job_id, "status": queued.status.value, "created": queued.created}
        )
        return
    how = "created" if queued.created else "deduplicated: an existing job holds its key"
    click.echo(f"job {queued.job_id} {queued.status.value} ({how})")


#: The control keywords ``tracked call`` sets with an option of its own.
_OPTION_OF = {"_idempotency_key": "--idempotency-key", "_correlation_id": "--correlation-id"}


def _no_control(kwargs: dict[str, Any]) -> None:
    """``--kwargs`` holds the task's named arguments only: a control keyword there is
    refused, naming the option to use (its value never echoed)."""
    for name in Control.keywords():
        if name in kwargs:
            option = _OPTION_OF.get(name)
            instead = f"use {option}" if option else "tracked call does not set it"
            raise click.BadParameter(
                f"{name} is a control keyword, not an argument of the task ({instead})",
                param_hint="--kwargs",
            )


def _given(control: dict[str, str | None]) -> dict[str, str]:
    """The options given (an empty one too: the API refuses it)."""
    return {
        name: check_text(name[1:], value) for name, value in control.items() if value is not None
    }
