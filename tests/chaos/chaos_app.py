"""The Celery app the soak's ``celery worker`` and ``celery beat`` processes run
(``celery -A chaos_app``, with this folder on ``PYTHONPATH``); the soak builds the same
app in-process to enqueue. celery-tracked reads its settings from the environment
(``CELERY_TRACKED_*``, set by the soak); the app's own:

    CHAOS_BROKER     the private broker (a ``redis-server`` of the soak's)
    CHAOS_RUNS_URL   the private PostgreSQL database where ledger bodies count their
                     starts (autocommit, outside the job's transaction)
    CHAOS_SABOTAGE   to check that the checks can fail: ``leak`` (secret bodies print
                     their password), ``twice`` (ledger bodies also apply their effect
                     outside the job's transaction)

Each kind of job is one task; the soak knows what status each must end in.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from celery import Celery
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from celery_tracked import tracked_task
from celery_tracked.core.settings import DEFAULT_REDACT_KEYS

QUEUE = "chaos"
#: A key of ``tracked_redact_keys`` added to the defaults (the secret jobs use both).
SECRET_KEY = "chaos_secret"

app = Celery("chaos", broker=os.environ.get("CHAOS_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_default_queue=QUEUE,
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=None,
    worker_redirect_stdouts=False,
    result_backend=None,
    task_ignore_result=True,
    tracked_default_backoff_ms=200,
    tracked_redact_keys=(*DEFAULT_REDACT_KEYS, SECRET_KEY),
)

_runs: dict[int, Engine] = {}


SABOTAGE = os.environ.get("CHAOS_SABOTAGE", "")
_LEDGER_ADD = text(
    "INSERT INTO chaos_ledger (job_id, n) VALUES (:j, 1) "
    "ON CONFLICT (job_id) DO UPDATE SET n = chaos_ledger.n + 1"
)


def _count_start(job_id: str) -> None:
    """Count a ledger body's start outside its transaction (a lower bound: a failed write
    is ignored), so the soak can show bodies that ran twice and still applied once."""
    url = os.environ.get("CHAOS_RUNS_URL")
    if not url:
        return
    engine = _runs.get(os.getpid())
    if engine is None:
        engine = _runs[os.getpid()] = create_engine(url, poolclass=NullPool)
    with contextlib.suppress(Exception), engine.begin() as conn:
        conn.execute(text("INSERT INTO chaos_runs (job_id) VALUES (:j)"), {"j": job_id})
        if SABOTAGE == "twice":
            conn.execute(_LEDGER_ADD, {"j": job_id})


@tracked_task(app=app, name="chaos.plain", max_attempts=10)
def plain(n: int, ms: int) -> int:
    time.sleep(ms / 1000)
    return n


@tracked_task(app=app, bind=True, name="chaos.ledger", max_attempts=10)
def ledger(self: Any, n: int, ms: int) -> int:
    job_id = str(self.request.id)
    _count_start(job_id)
    with self.transaction() as conn:
        conn.execute(_LEDGER_ADD, {"j": job_id})
    time.sleep(ms / 1000)  # a kill here lands between the effect and the completion
    return n


@tracked_task(app=app, bind=True, name="chaos.flaky", max_attempts=10, backoff_ms=200)
def flaky(self: Any, n: int, ms: int) -> int:
    time.sleep(ms / 1000)
    if self.request.retries < 2:
        raise ConnectionError(f"chaos: transient failure of attempt {self.request.retries + 1}")
    return n


@tracked_task(app=app, name="chaos.doomed", max_attempts=2, backoff_ms=100)
def doomed(n: int) -> None:
    raise ValueError(f"chaos: job {n} always fails")


@tracked_task(app=app, bind=True, name="chaos.secret", max_attempts=10, backoff_ms=100)
def secret(self: Any, n: int, ms: int, password: str, chaos_secret: str) -> dict[str, int]:
    """Its first attempt fails with the secrets in the exception's text (celery-tracked
    masks them before Celery logs it: docs/security.md, "Exceptions seen by Celery")."""
    time.sleep(ms / 1000)
    if SABOTAGE == "leak":
        print(f"chaos sabotage: {password}")
    if self.request.retries == 0:
        raise ConnectionError(f"chaos: login with {password} refused (chaos_secret={chaos_secret})")
    return {"n": n, "lengths": len(password) + len(chaos_secret)}


@tracked_task(app=app, name="chaos.keyed_row", max_attempts=10, idempotency_key="row:{k}")
def keyed_row(k: str, ms: int) -> str:
    time.sleep(ms / 1000)
    return k


@tracked_task(
    app=app,
    name="chaos.keyed_ended",
    max_attempts=10,
    idempotency_key="ended:{k}",
    key_lifetime="ended",
)
def keyed_ended(k: str, ms: int) -> str:
    time.sleep(ms / 1000)
    return k
