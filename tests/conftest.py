"""Shared fixtures: real services, fresh databases, deadline-based waiting.

A missing service fails loudly when ``CI=true``. Otherwise its tests are skipped (with the
reason), and the end of the run says, in red, which services were missing and how many
tests did not run because of them: a green run without them covers less than it looks.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from celery_tracked.store import migrate

T = TypeVar("T")

#: A user's project with its own pytest.ini and tests/, run by
#: tests/acceptance/test_eager_proj.py in a pytest of its own; not part of this suite.
collect_ignore = ["eager_proj", "plugin_proj"]  # plugin_proj: test_testing_plugin.py
collect_ignore += ["plugin_own_app"]  # run by acceptance/test_plugin_own_app.py

REDIS_HOST = os.environ.get("TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("TEST_REDIS_PORT", "6379"))
PG_ADMIN_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ROOT = Path(__file__).resolve().parent.parent


#: Starts the reason of every test skipped for a missing service (the summary counts them).
MISSING = "missing service: "
_NOT_REACHABLE = " is not reachable"


def _require(ok: bool, what: str) -> None:
    if ok:
        return
    if IN_CI:
        pytest.fail(f"{what}{_NOT_REACHABLE} (CI=true: a missing service is an error)")
    pytest.skip(f"{MISSING}{what}{_NOT_REACHABLE}")


def _missing_service(report: pytest.TestReport) -> str | None:
    """The service a skipped test's report names as missing, if any."""
    longrepr = report.longrepr
    if not (isinstance(longrepr, tuple) and len(longrepr) == 3):
        return None
    reason = str(longrepr[2])
    start = reason.find(MISSING)
    if start < 0:
        return None
    return reason[start + len(MISSING) :].removesuffix(_NOT_REACHABLE)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say loudly which services were missing and how many tests they kept from running."""
    missing: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        service = _missing_service(report)
        if service is not None:
            missing[service] = missing.get(service, 0) + 1
    if not missing:
        return
    total = sum(missing.values())
    terminalreporter.section("SERVICES MISSING: TESTS NOT RUN", sep="!", red=True, bold=True)
    for service, count in sorted(missing.items()):
        terminalreporter.write_line(
            f"  {service}{_NOT_REACHABLE}: {count} test(s) skipped", red=True, bold=True
        )
    terminalreporter.write_line(
        f"{total} test(s) did not run, so this result does not cover them. Start the "
        "services (see README.md), or set CI=true to make a missing service an error.",
        red=True,
        bold=True,
    )


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def wait_for(
    condition: Callable[[], T], timeout: float = 20.0, interval: float = 0.05, what: str = ""
) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}: {last!r}")


@pytest.fixture(scope="session")
def redis_available() -> None:
    _require(_port_open(REDIS_HOST, REDIS_PORT), f"Redis at {REDIS_HOST}:{REDIS_PORT}")


@contextmanager
def _redis_db() -> Iterator[int]:
    """A Redis logical database (2..15) held under a host-wide file lock, so concurrent
    pytest runs on one machine never flush each other's data."""
    while True:
        for db in range(2, 16):
            handle = open(f"/tmp/celery-tracked-test-redis-db-{db}.lock", "w")  # noqa: SIM115
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield db
                return
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
        time.sleep(0.1)


@pytest.fixture
def redis_url(redis_available: None) -> Iterator[str]:
    """A flushed Redis database of its own for this test."""
    with _redis_db() as db:
        yield from _flushed_redis(db)


def _flushed_redis(db: int) -> Iterator[str]:
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db)
    client.flushdb()
    try:
        yield f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"
    finally:
        client.flushdb()
        client.close()


@pytest.fixture(scope="session")
def postgres_available() -> None:
    url = make_url(PG_ADMIN_URL)
    _require(_port_open(url.host or "127.0.0.1", url.port or 5432), "PostgreSQL")


def _fresh_postgres() -> Iterator[str]:
    name = f"ct_{uuid.uuid4().hex[:12]}"
    # pre-ping: a test may restart the server (``pg_restart``) before the drop below
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def postgres_url(postgres_available: None) -> Iterator[str]:
    """A new, empty PostgreSQL database for this test."""
    yield from _fresh_postgres()


MARIADB_URL = os.environ.get("TEST_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/test")


@pytest.fixture
def mariadb_url() -> Iterator[str]:
    """A new, empty MariaDB database for this test."""
    url = make_url(MARIADB_URL)
    _require(_port_open(url.host or "127.0.0.1", url.port or 3306), "MariaDB")
    name = f"ct_{uuid.uuid4().hex[:12]}"
    admin = create_engine(MARIADB_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE `{name}`"))
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tracked.sqlite3'}"


@pytest.fixture(params=["postgres", "sqlite"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty tracking database, on PostgreSQL and on SQLite."""
    if request.param == "postgres":
        request.getfixturevalue("postgres_available")
        for url in _fresh_postgres():
            migrate.upgrade(url)
            yield url
    else:
        url = f"sqlite:///{tmp_path / 'tracked.sqlite3'}"
        migrate.upgrade(url)
        yield url


@pytest.fixture
def pg_database_url(postgres_url: str) -> str:
    """A migrated, empty PostgreSQL tracking database."""
    migrate.upgrade(postgres_url)
    return postgres_url
