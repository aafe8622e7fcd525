"""The suite leaves a Redis it does not own alone: someone's data in every database (0-15)
of the default Redis, 127.0.0.1:6379, is still there after tests that flush their Redis
DBs and run a real worker.

The test seeds a key of its own in each of the 16 databases, runs a slice of the suite in a
pytest of its own with the default settings (no ``TEST_REDIS_*``: the private
redis-server), then checks each key and removes it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.conftest import IN_CI, ROOT, _port_open

pytestmark = [pytest.mark.untouched, pytest.mark.process]

#: Flushes its Redis DB (the fixture) and runs the Lua limiter on it; a real worker on
#: Redis, PostgreSQL and PgBouncer.
SLICE = [
    "tests/integration/test_give_back.py::test_the_lua_limiter_grants_starts_after_the_claim_on_redis_time",
    "tests/acceptance/test_lifecycle.py::test_feat_33_02_worker_moves_job_through_processing_to_completed",
]


@pytest.fixture
def others_kept_out() -> Iterator[set[int]]:
    """Hold the host-wide locks of DBs 2..15 that a pytest run of this project pointed at
    6379 (``TEST_REDIS_URL``, or an older checkout) takes before it flushes one, so a flush
    seen here is this run's. The databases 0..15 it may check: those whose lock another
    run holds for over 30 s are left out, as that run flushes them (under ``CI=true``,
    where nothing else runs, every database is checked)."""
    handles = []
    held: set[int] = {0, 1}
    deadline = time.monotonic() + 30
    try:
        for db in range(2, 16):
            handle = open(f"/tmp/celery-tracked-test-redis-db-{db}.lock", "w")  # noqa: SIM115
            handles.append(handle)
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if time.monotonic() < deadline:
                        time.sleep(0.1)
                        continue
                    break
                held.add(db)
                break
        assert not IN_CI or held == set(range(16)), f"Redis DBs locked by others: {held}"
        yield held
    finally:
        for handle in handles:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()


@pytest.fixture
def seeded(others_kept_out: set[int]) -> Iterator[dict[int, tuple[str, str]]]:
    """A key of this test in each database of 127.0.0.1:6379 it may check (expiring in an
    hour, in case the test is killed); removed afterwards."""
    if not _port_open("127.0.0.1", 6379):
        pytest.skip("no Redis on 127.0.0.1:6379: nothing of anyone's to leave alone")
    marker = uuid.uuid4().hex
    keys = {
        db: (f"celery-tracked-suite-canary:{marker}:{db}", f"value-{db}")
        for db in sorted(others_kept_out)
    }
    for db, (key, value) in keys.items():
        with redis.Redis(port=6379, db=db) as client:
            client.set(key, value, ex=3600)
    try:
        yield keys
    finally:
        for db, (key, _) in keys.items():
            with redis.Redis(port=6379, db=db) as client:
                client.delete(key)


def test_a_run_leaves_every_database_of_the_default_redis_untouched(
    seeded: dict[int, tuple[str, str]],
) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TEST_")}
    environ["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *SLICE, "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-3000:]
    for db, (key, value) in seeded.items():
        with redis.Redis(port=6379, db=db) as client:
            assert client.get(key) == value.encode(), f"database {db} of 127.0.0.1:6379 lost {key}"
