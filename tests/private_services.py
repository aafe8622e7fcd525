"""Servers a test starts for itself, on ports of its own, and tears down: a PostgreSQL
cluster it may crash (``initdb`` + ``pg_ctl`` in a temporary directory) and a PgBouncer.

The shared services are never restarted or reconfigured (other test runs use them): a
test that crashes a server, or needs a pooler configured its own way, starts one here.
Binaries come from ``/usr/lib/postgresql/<version>/bin`` and ``pgbouncer`` (installed by
``bash .ci/pgbouncer``). As root, the servers run as the ``postgres`` user.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from .conftest import _require, pg_admin_url, wait_for
from .own_services import free_port

#: Ports tried, in order, for a private server (the first free one is used).
PG_PORTS = range(
    int(os.environ.get("TEST_PRIVATE_PG_PORT", "55400")),
    int(os.environ.get("TEST_PRIVATE_PG_PORT", "55400")) + 50,
)
PGBOUNCER_PORTS = range(
    int(os.environ.get("TEST_PRIVATE_PGBOUNCER_PORT", "6440")),
    int(os.environ.get("TEST_PRIVATE_PGBOUNCER_PORT", "6440")) + 10,
)


def _free_port(ports: Sequence[int]) -> int:
    """A free port: the kernel's choice (no race between parallel test processes), unless
    ``TEST_PRIVATE_PG_PORT``/``TEST_PRIVATE_PGBOUNCER_PORT`` ask for a range."""
    if not (
        os.environ.get("TEST_PRIVATE_PG_PORT") or os.environ.get("TEST_PRIVATE_PGBOUNCER_PORT")
    ):
        return free_port()
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {ports[0]}..{ports[-1]}")


def _pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: p.parts)
    return found[-1].parent if found else None


def _as_server_user(command: Sequence[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run ``command`` as ``postgres`` then."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return list(command)


def _owned_tmpdir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")
    return path


@dataclass
class PrivatePostgres:
    """A private cluster: ``url(database)``, ``crash()`` (``pg_ctl stop -m immediate``),
    ``start()``."""

    bin: Path
    data: Path
    port: int
    settings: Mapping[str, str]

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _ctl(self, *args: str) -> None:
        command = [str(self.bin / "pg_ctl"), "-D", str(self.data), *args]
        subprocess.run(_as_server_user(command), check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = [f"-p {self.port}", "-c listen_addresses=127.0.0.1"]
        options += [f"-c unix_socket_directories={self.data}"]
        options += [f"-c {name}={value}" for name, value in self.settings.items()]
        log = str(self.data / "server.log")
        self._ctl("start", "-w", "-t", "30", "-l", log, "-o", " ".join(options))

    def crash(self) -> None:
        """Stop at once, as a crash would: no checkpoint, unflushed WAL is lost."""
        self._ctl("stop", "-m", "immediate", "-w", "-t", "30")

    def stop(self) -> None:
        """Stop for good (the cluster is thrown away: no checkpoint needed)."""
        with contextlib.suppress(subprocess.SubprocessError):
            self._ctl("stop", "-m", "immediate", "-w", "-t", "30")


@contextlib.contextmanager
def private_postgres(settings: Mapping[str, str] | None = None) -> Iterator[PrivatePostgres]:
    """A new PostgreSQL cluster (trust auth, user ``postgres``) on a free port of
    ``PG_PORTS``, started with ``settings`` (``-c name=value``); removed afterwards."""
    bin_dir = _pg_bin()
    _require(bin_dir is not None, "PostgreSQL server binaries (/usr/lib/postgresql/*/bin)")
    assert bin_dir is not None
    root = _owned_tmpdir("ct-private-pg-")
    data = root / "data"
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"]
    subprocess.run(
        _as_server_user([*initdb, "--no-sync", "-E", "UTF8"]),
        check=True,
        capture_output=True,
        timeout=120,
    )
    cluster = PrivatePostgres(bin_dir, data, _free_port(PG_PORTS), dict(settings or {}))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def private_pgbouncer(
    upstream_port: int | None = None, pool_size: int = 3, pool_mode: str = "transaction"
) -> Iterator[int]:
    """A PgBouncer (``pool_mode``, ``pool_size`` server connections per database) on a
    free port in front of 127.0.0.1:``upstream_port`` (default: the tests' PostgreSQL,
    the private cluster once ``postgres_available`` started it); its port."""
    if upstream_port is None:  # the tests' PostgreSQL (the session's private cluster)
        upstream_port = make_url(pg_admin_url()).port or 5432
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    _require(os.access(binary, os.X_OK), "pgbouncer (install it with `bash .ci/pgbouncer`)")
    root = _owned_tmpdir("ct-private-pgbouncer-")
    port = _free_port(PGBOUNCER_PORTS)
    ini = root / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host=127.0.0.1 port={upstream_port} user=postgres\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = any\npool_mode = {pool_mode}\nmax_client_conn = 200\n"
        f"default_pool_size = {pool_size}\nlogfile = {root}/pgbouncer.log\n"
        f"pidfile = {root}/pgbouncer.pid\n"
    )
    command = [binary, "-d", str(ini)]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "postgres"]
    subprocess.run(command, check=True, capture_output=True, timeout=30)
    pidfile = root / "pgbouncer.pid"
    try:
        wait_for(pidfile.exists, timeout=20, what="PgBouncer's pid file")
        wait_for(lambda: _accepts(port), timeout=20, what=f"PgBouncer on port {port}")
        yield port
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
            wait_for(lambda: not pidfile.exists(), timeout=10, what="PgBouncer's exit")
        shutil.rmtree(root, ignore_errors=True)


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0
