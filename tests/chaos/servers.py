"""The soak's own servers, each on a free port in a temporary directory, and never a
shared one: a PostgreSQL cluster (``initdb`` + ``pg_ctl``), a PgBouncer in transaction
pooling mode in front of it, and ``redis-server`` processes without persistence.

As root, PostgreSQL and PgBouncer run as the ``postgres`` user (they refuse root).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    """A port nothing listens on now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return command


def owned_tmpdir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")
    return path


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: p.parts)
    if not found:
        raise RuntimeError("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin)")
    return found[-1].parent


@dataclass
class Postgres:
    """A private cluster: trust auth, user ``postgres``; ``restart()`` crashes it
    (``pg_ctl stop -m immediate``: no checkpoint) and starts it again."""

    root: Path
    port: int = field(default_factory=free_port)
    bin: Path = field(default_factory=_pg_bin)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str, port: int | None = None) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{port or self.port}/{database}"

    def _ctl(self, *args: str) -> None:
        command = [str(self.bin / "pg_ctl"), "-D", str(self.data), *args]
        subprocess.run(_as_server_user(command), check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        initdb = [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust"]
        subprocess.run(
            _as_server_user([*initdb, "--no-sync", "-E", "UTF8"]),
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        options = [f"-p {self.port}", "-c listen_addresses=127.0.0.1"]
        options += [f"-c unix_socket_directories={self.data}", "-c max_connections=200"]
        options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        log = str(self.root / "server.log")
        self._ctl("start", "-w", "-t", "60", "-l", log, "-o", " ".join(options))

    def crash(self) -> None:
        self._ctl("stop", "-m", "immediate", "-w", "-t", "30")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self.crash()

    def dump(self, database: str) -> str:
        """Every row of ``database`` as SQL text (``pg_dump --data-only``)."""
        command = [str(self.bin / "pg_dump"), "-h", "127.0.0.1", "-p", str(self.port)]
        command += ["-U", "postgres", "--data-only", database]
        done = subprocess.run(command, check=True, capture_output=True, timeout=120)
        return done.stdout.decode(errors="replace")


@dataclass
class PgBouncer:
    """PgBouncer in transaction pooling mode in front of a private cluster."""

    root: Path
    upstream_port: int
    pool_size: int = 10
    port: int = field(default_factory=free_port)

    def start(self) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.access(binary, os.X_OK):
            raise RuntimeError("pgbouncer is not installed (`bash .ci/pgbouncer` installs it)")
        ini = self.root / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={self.upstream_port} user=postgres\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            "auth_type = any\npool_mode = transaction\nmax_client_conn = 500\n"
            f"default_pool_size = {self.pool_size}\nlogfile = {self.root}/pgbouncer.log\n"
            f"pidfile = {self.root}/pgbouncer.pid\n"
        )
        command = [binary, "-d", str(ini)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "postgres"]
        subprocess.run(command, check=True, capture_output=True, timeout=30)
        wait_until(lambda: accepts(self.port), 20, f"PgBouncer on port {self.port}")

    def stop(self) -> None:
        pidfile = self.root / "pgbouncer.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
        with contextlib.suppress(RuntimeError):
            wait_until(lambda: not pidfile.exists(), 10, "PgBouncer's exit")


@dataclass
class Redis:
    """A ``redis-server`` without persistence: ``restart()`` (SIGKILL, start again on the
    same port) loses everything it held, as a crash of a cache-configured Redis does."""

    root: Path
    name: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.root)]
        command += ["--logfile", str(self.root / f"{self.name}.log")]
        self.proc = subprocess.Popen(command, start_new_session=True)
        wait_until(lambda: accepts(self.port), 20, f"redis-server {self.name} on {self.port}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.kill()
