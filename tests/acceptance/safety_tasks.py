"""Acceptance tasks of the reliability issue's safety items (issue 6: 3, 5, 8), added to
``tracked_app.create_app``'s app: runs killed by Celery, unprintable errors, secrets."""

from __future__ import annotations

import builtins
import os
import time
from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import tracked_task

#: A redact key of the test app besides the defaults, with a hyphen.
CUSTOM_KEY = "x-client-sig"


class Unprintable(Exception):
    """An exception whose ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


def add_safety_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.time_limited",
        queue=queue,
        max_attempts=2,
        backoff_ms=100,
        time_limit=2,
    )
    def time_limited(self: Any, x: Any, hang_runs: int = 1) -> dict[str, Any]:
        """Runs up to ``hang_runs`` hang until the hard time limit kills them."""
        r, job_id, run, started = begin(self)
        if run <= hang_runs:
            r.set(f"holding:{job_id}", os.getpid())
            time.sleep(60)
        end(r, job_id, started)
        return {"x": x, "run": run}

    @tracked_task(app=app, bind=True, shared=False, name="acc.long", queue=queue, max_attempts=3)
    def long(self: Any, x: Any) -> dict[str, Any]:
        """Says it is running, then runs for a minute (the test terminates it)."""
        r, job_id, run, started = begin(self)
        r.set(f"holding:{job_id}", os.getpid())
        time.sleep(60)
        end(r, job_id, started)
        return {"x": x, "run": run}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.unprintable",
        queue=queue,
        max_attempts=2,
        backoff_ms=50,
    )
    def unprintable(self: Any, x: Any) -> None:
        r, job_id, _run, started = begin(self)
        end(r, job_id, started)
        raise Unprintable(x)

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.surrogate",
        queue=queue,
        max_attempts=2,
        backoff_ms=50,
    )
    def surrogate(self: Any, name_hex: str, api_token: str) -> None:
        """A file name received as bytes, decoded the POSIX way (a lone surrogate), in the
        stage, a log line and the error (trial of issue 22, F1)."""
        r, job_id, _run, started = begin(self)
        end(r, job_id, started)
        path = os.fsdecode(bytes.fromhex(name_hex))
        self.set_progress(50, stage=f"reading {path}")
        self.log(f"opening {path}")
        raise ValueError(f"bad file {path}")

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.leaky",
        queue=queue,
        max_attempts=2,
        backoff_ms=50,
    )
    def leaky(
        self: Any, user: str, password: str, dsn: str, fail_times: int = 1, **extra: Any
    ) -> dict[str, Any]:
        """Runs up to ``fail_times`` raise an ``ExceptionGroup`` carrying the secrets every
        way an exception can: message, a dict argument, a note, a member's note."""
        r, job_id, run, started = begin(self)
        end(r, job_id, started)
        if run <= fail_times:
            member = ValueError(f"login failed for {user} with password {password}")
            member.__notes__ = [f"signature was {extra.get(CUSTOM_KEY)}"]
            group = builtins.ExceptionGroup(  # Python 3.11+
                "batch failed",
                [member, KeyError({"password": password, "user": user}), ConnectionError(dsn)],
            )
            group.__notes__ = [f"while connecting with {password}"]
            raise group
        return {"user": user, "run": run}
