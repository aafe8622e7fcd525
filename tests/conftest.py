"""Shared fixtures: real services, fresh databases, deadline-based waiting.

A missing service fails loudly when ``CI=true``. Otherwise its tests are skipped (with the
reason), and the end of the run says, in red, which services were missing and how many
tests did not run because of them: a green run without them covers less than it looks.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from celery_tracked.store import migrate

from . import ordering, own_services

T = TypeVar("T")

#: A user's project with its own pytest.ini and tests/, run by
#: tests/acceptance/test_eager_proj.py in a pytest of its own; not part of this suite.
collect_ignore = ["eager_proj", "plugin_proj"]  # plugin_proj: test_testing_plugin.py
collect_ignore += ["plugin_own_app"]  # run by acceptance/test_plugin_own_app.py

#: The Redis the tests use: the private server's port once ``pytest_configure`` started it.
REDIS_HOST = "127.0.0.1"
REDIS_PORT = 0
#: An external PostgreSQL (its ``postgres`` database's URL) instead of a private cluster.
_EXTERNAL_POSTGRES = os.environ.get("TEST_POSTGRES_URL") or None
#: The admin URL of the PostgreSQL the tests use (the private cluster's, once started).
PG_ADMIN_URL = _EXTERNAL_POSTGRES or "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
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


# -- Redis: a private redis-server per pytest process, unless TEST_REDIS_URL says otherwise

#: An external Redis to use instead of a private server (its DBs 2..15, each held under a
#: host-wide file lock). ``TEST_REDIS_HOST``/``TEST_REDIS_PORT`` are the older spelling.
_EXTERNAL_REDIS = os.environ.get("TEST_REDIS_URL") or (
    f"redis://{os.environ.get('TEST_REDIS_HOST', '127.0.0.1')}:"
    f"{os.environ.get('TEST_REDIS_PORT', '6379')}"
    if ("TEST_REDIS_HOST" in os.environ or "TEST_REDIS_PORT" in os.environ)
    else None
)
#: Why the private redis-server could not start (None: it did, or an external one is used).
_REDIS_PROBLEM: str | None = None
_REDIS_SERVER: own_services.RedisServer | None = None
if _EXTERNAL_REDIS is not None:
    _external = redis.Redis.from_url(_EXTERNAL_REDIS).connection_pool.connection_kwargs
    REDIS_HOST, REDIS_PORT = str(_external.get("host")), int(_external.get("port", 6379))


def _xdist_controller(config: pytest.Config) -> bool:
    """The xdist process that only hands tests to its workers (it runs none itself)."""
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """Start this process's private redis-server (not in an xdist controller)."""
    global REDIS_PORT, _REDIS_PROBLEM, _REDIS_SERVER
    if _EXTERNAL_REDIS is not None or _xdist_controller(config) or _REDIS_SERVER is not None:
        return
    if config.getoption("--no-services", default=False):
        return
    try:
        _REDIS_SERVER = own_services.RedisServer()
    except (RuntimeError, OSError) as exc:
        _REDIS_PROBLEM = str(exc)
        return
    REDIS_PORT = _REDIS_SERVER.port


def pytest_unconfigure(config: pytest.Config) -> None:
    global _PG_SERVER, _REDIS_SERVER
    if _REDIS_SERVER is not None:
        _REDIS_SERVER.stop()
        _REDIS_SERVER = None
    _drop_pg_templates()
    if _PG_SERVER is not None:
        _PG_SERVER.stop()
        _PG_SERVER = None


@pytest.fixture(scope="session")
def redis_available() -> None:
    if _REDIS_PROBLEM is not None:
        _require(False, f"a private redis-server ({_REDIS_PROBLEM})")
    _require(_port_open(REDIS_HOST, REDIS_PORT), f"Redis at {REDIS_HOST}:{REDIS_PORT}")


#: The private server's databases this process has handed out and not got back.
_DBS_IN_USE: set[int] = set()


@contextmanager
def _redis_db() -> Iterator[int]:
    """A Redis logical database of this test's own: any free one of the private server's
    16, or, on an external Redis, one of 2..15 held under a host-wide file lock, so
    concurrent pytest runs on one machine never flush each other's data."""
    if _EXTERNAL_REDIS is None:
        db = next(db for db in range(16) if db not in _DBS_IN_USE)
        _DBS_IN_USE.add(db)
        try:
            yield db
        finally:
            _DBS_IN_USE.discard(db)
        return
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


# -- PostgreSQL: a private cluster per pytest process, unless TEST_POSTGRES_URL is set ---

_PG_SERVER: own_services.PostgresServer | None = None
_PG_TEMPLATES: list[str] = []


def pg_admin_url() -> str:
    """The URL of the ``postgres`` database of the server the tests use (the private
    cluster once ``postgres_available`` started it, else ``TEST_POSTGRES_URL``)."""
    return PG_ADMIN_URL


def pg_server() -> own_services.PostgresServer | None:
    """The private cluster (None when ``TEST_POSTGRES_URL`` points at a server)."""
    return _PG_SERVER


@pytest.fixture(scope="session")
def postgres_available() -> None:
    global PG_ADMIN_URL, _PG_SERVER
    if _EXTERNAL_POSTGRES is None and _PG_SERVER is None:
        try:
            _PG_SERVER = own_services.PostgresServer()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            _require(False, f"a private PostgreSQL cluster ({exc})")
        assert _PG_SERVER is not None
        PG_ADMIN_URL = _PG_SERVER.admin_url
    url = make_url(PG_ADMIN_URL)
    _require(_port_open(url.host or "127.0.0.1", url.port or 5432), "PostgreSQL")


def _admin_engine() -> Engine:
    # pre-ping: a test may restart the server (``pg_restart``) between two uses
    return create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)


@pytest.fixture(scope="session")
def pg_template(postgres_available: None) -> str:
    """The name of a PostgreSQL database migrated to the head once per process (named by
    the migrations' fingerprint), which ``pg_database_url`` clones: a clone takes tens of
    milliseconds, the migrations hundreds."""
    name = f"ct_tpl_{own_services.migrations_fingerprint()}"
    if _EXTERNAL_POSTGRES is not None:  # a shared server: one template per process
        name += f"_{os.getpid()}"
    admin = _admin_engine()
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        _PG_TEMPLATES.append(name)
        migrate.upgrade(make_url(PG_ADMIN_URL).set(database=name).render_as_string(False))
    finally:
        admin.dispose()
    return name


def _drop_pg_templates() -> None:
    if not _PG_TEMPLATES or (_PG_SERVER is None and _EXTERNAL_POSTGRES is None):
        return
    admin = _admin_engine()
    try:
        with admin.connect() as conn:
            for name in _PG_TEMPLATES:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    except Exception:
        pass
    finally:
        admin.dispose()
        _PG_TEMPLATES.clear()


def _fresh_postgres(template: str | None = None) -> Iterator[str]:
    """A new database of the tests' server, empty or a copy of ``template``; dropped."""
    name = f"ct_{uuid.uuid4().hex[:12]}"
    admin = _admin_engine()
    clause = f' TEMPLATE "{template}"' if template else ""
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"{clause}'))
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


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per process; tests get a copy (0.3 ms, not 250 ms)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "tracked.sqlite3"
    migrate.upgrade(f"sqlite:///{path}")
    return path


def migrated_sqlite(template: Path, target: Path) -> str:
    """The URL of ``target``, a copy of the migrated ``template``."""
    shutil.copyfile(template, target)
    return f"sqlite:///{target}"


@pytest.fixture(params=["postgres", "sqlite"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty tracking database, on PostgreSQL and on SQLite."""
    if request.param == "postgres":
        yield from _fresh_postgres(request.getfixturevalue("pg_template"))
    else:
        template = request.getfixturevalue("sqlite_template")
        yield migrated_sqlite(template, tmp_path / "tracked.sqlite3")


@pytest.fixture
def pg_database_url(pg_template: str) -> Iterator[str]:
    """A migrated, empty PostgreSQL tracking database (a copy of the migrated template)."""
    yield from _fresh_postgres(pg_template)


# -- markers that say what a test needs, set from its fixtures --------------------------

#: Modules that run a user's project in a pytest or a Python of its own.
SUBPROCESS_PROJECTS = {
    "test_demo.py",
    "test_readme.py",
    "test_django_proj.py",
    "test_example_procfile.py",
    "test_eager_proj.py",
    "test_testing_plugin.py",
    "test_docs_site.py",
}
#: Modules that build a wheel and install it in a fresh virtual environment.
PACKAGING = {"test_readme.py", "test_example_procfile.py", "test_migrations.py"}
_SERVICE_FIXTURES = {
    "postgres": {"postgres_available", "postgres_url", "pg_database_url", "pg_template"},
    "redis": {"redis_available", "redis_url"},
    "mariadb": {"mariadb_url"},
}
_PROCESS_FIXTURES = {"start_worker", "start_beat"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-services",
        action="store_true",
        help="deselect every test that needs Redis, PostgreSQL or MariaDB (make test-fast)",
    )


def _needs(item: pytest.Item) -> set[str]:
    """The services ``item`` uses, from its fixtures and its backend parameter."""
    names = set(getattr(item, "fixturenames", ()))
    needs = {service for service, fixtures in _SERVICE_FIXTURES.items() if names & fixtures}
    params = getattr(getattr(item, "callspec", None), "params", {})
    for value in (params.get("backend"), params.get("database_url")):
        if isinstance(value, str) and value.startswith("postgres"):
            needs.add("postgres")
        elif value == "mariadb":
            needs.add("mariadb")
    return needs


#: A ``serial`` test's bounds hold on a machine that runs nothing else: beside other tests
#: (under xdist) it is skipped, and ``make test-serial`` runs it alone.
SERIAL_UNDER_XDIST = "timing-critical: runs alone (make test-serial), not beside other tests"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with the services it uses (``postgres``, ``redis``, ``mariadb``),
    ``process`` when it starts a worker or Beat, ``subprocess_project``, ``packaging``;
    with ``--no-services``, deselect those that need a service."""
    kept, dropped = [], []
    for item in items:
        needs = _needs(item)
        for service in needs:
            item.add_marker(service)
        if set(getattr(item, "fixturenames", ())) & _PROCESS_FIXTURES:
            item.add_marker("process")
        if item.path.name in SUBPROCESS_PROJECTS:
            item.add_marker("subprocess_project")
        if item.path.name in PACKAGING:
            item.add_marker("packaging")
        (dropped if needs or item.path.parts[-2] == "acceptance" else kept).append(item)
    if config.getoption("--no-services"):
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for item in items:
            if item.get_closest_marker("serial"):
                item.add_marker(pytest.mark.skip(reason=SERIAL_UNDER_XDIST))
    ordering.reorder(items)
