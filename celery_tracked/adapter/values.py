"""The values Celery carries for a tracked task, in the form Celery itself sends and stores.

- :func:`sent_arguments`: a ``pydantic=True`` task's arguments as Celery 5.7's
  ``apply_async`` sends them: each model the task's wrapper can rebuild is dumped
  (``model_dump(mode="json")``), other values are left as they are. Every producer path
  prepares the call (payload, idempotency key, redaction, ``argsrepr``) on that dumped form,
  so a model is tracked like the dict it is sent as, and the worker's wrapper validates it
  back into the model the body receives.
- :func:`stored_result`: what Celery's result backend stores for a body's return value: an
  ``AsyncResult``/``GroupResult`` (the canvas the body started) as its tuple form
  (``as_tuple()``: ``[[id, parent], children]`` once in JSON), rebuilt with
  ``celery.result.result_from_tuple``; the row's ``result`` is that form too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery.result import ResultBase

__all__ = ["sent_arguments", "stored_result"]


def sent_arguments(
    task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` as Celery sends a call of ``task``: the models of a
    ``pydantic=True`` task dumped. Also with the ``pickle`` serializer (which Celery lets
    carry models as they are): a job's payload is JSON whatever the message's serializer,
    and the worker's wrapper validates the dumped form back into the same model."""
    dump = getattr(task, "_dump_pydantic_arguments", None)
    if dump is None:
        return tuple(args), dict(kwargs)
    sent_args, sent_kwargs = dump(tuple(args), dict(kwargs))
    return tuple(sent_args or ()), dict(sent_kwargs or {})


def stored_result(result: Any) -> Any:
    """``result`` as Celery's backend stores it (a JSON serializer): the tuple form of an
    ``AsyncResult``/``GroupResult``, anything else as it is."""
    if isinstance(result, ResultBase) and hasattr(result, "as_tuple"):
        return result.as_tuple()
    return result
