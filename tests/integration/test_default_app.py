"""A task declared without ``app=`` used from a thread (FastAPI's thread pool) binds to
Celery's default app, as a plain ``shared_task`` does (issue 12, item 12): the refusal
names the app it read and the fix. Each scenario runs in a fresh interpreter (Celery's
current and default apps are process state), on a real Redis and database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import redis

from celery_tracked.store.migrate import upgrade

from .test_enqueue import row_count

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, threading
    from celery import Celery, shared_task
    from celery_tracked import TrackedError, tracked_task

    app = Celery("proj", broker=os.environ["T_REDIS"])  # current in this thread only
    app.conf.tracked_database_url = os.environ["T_DB"]
    app.conf.tracked_redis_url = os.environ["T_REDIS"]

    @shared_task
    def plain(x):
        return x

    @tracked_task
    def tracked(x):
        return x

    def call(out):
        out["plain_app"] = plain.app.main
        if plain.app.main == "proj":
            plain.delay(1)
        try:
            out["created"] = tracked.enqueue(1).created
        except TrackedError as exc:
            out["error"] = [type(exc).__name__, getattr(exc, "setting", None), str(exc)]

    result = {}
    for where in sys.argv[1:]:
        if where == "set_default":
            app.set_default()
            continue
        out = result.setdefault(where, {})
        if where.startswith("thread"):
            worker = threading.Thread(target=call, args=(out,))
            worker.start()
            worker.join()
        else:
            call(out)
    print(json.dumps(result))
    """
)


def run(tmp_path: Path, database_url: str, redis_url: str, *steps: str, **env: str) -> Any:
    script = tmp_path / "proj_threads.py"
    script.write_text(SCRIPT)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY", "REDIS"))}
    environ.update(T_DB=database_url, T_REDIS=redis_url, **env)
    done = subprocess.run(
        [sys.executable, str(script), *steps],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=environ,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def test_a_thread_binds_both_tasks_to_celerys_default_app_and_the_refusal_says_so(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    upgrade(database_url)
    result, _ = run(tmp_path, database_url, redis_url, "main", "thread")
    assert result["main"] == {"plain_app": "proj", "created": True}
    thread = result["thread"]
    assert thread["plain_app"] == "default"  # Celery's reference: the same binding
    kind, setting, message = thread["error"]
    assert (kind, setting) == ("ConfigurationError", "tracked_redis_url")
    assert "Celery's default app 'default'" in message and "'proj'" in message
    assert "app.set_default()" in message and "tracked_task(app=app)" in message
    assert row_count(database_url) == 1  # the main thread's job only


def test_after_set_default_a_thread_uses_the_app_for_both_tasks(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    upgrade(database_url)
    result, _ = run(tmp_path, database_url, redis_url, "set_default", "thread")
    assert result["thread"] == {"plain_app": "proj", "created": True}
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.llen("celery") == 2  # the plain task's message and the tracked one's
    finally:
        client.close()
    assert row_count(database_url) == 1


def test_settings_found_in_the_environment_are_used_but_a_warning_names_the_app(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    """With ``CELERY_TRACKED_*`` in the environment Celery's default app is usable (as a
    plain task's): it is used, with a warning saying which app it is and the fix."""
    upgrade(database_url)
    env = {
        "CELERY_TRACKED_REDIS_URL": redis_url,
        "CELERY_TRACKED_DATABASE_URL": database_url,
        "CELERY_BROKER_URL": redis_url,  # the default app's broker too (never a shared one)
    }
    result, stderr = run(tmp_path, database_url, redis_url, "thread", **env)
    assert result["thread"] == {"plain_app": "default", "created": True}
    assert "tracking jobs with settings read from Celery's default app 'default'" in stderr
    assert "app.set_default()" in stderr
