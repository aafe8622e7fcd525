"""The servers a test session owns: a private ``redis-server`` and a private PostgreSQL
cluster, each on a free port chosen at run time, started once per pytest process (so once
per xdist worker) and removed when the session ends.

The suite never writes to a Redis or a PostgreSQL it did not start, unless it is pointed at
one on purpose (``TEST_REDIS_URL``, ``TEST_POSTGRES_URL``: see tests/README.md); there it
only uses Redis DBs it holds a host-wide lock on and ``ct_*`` databases it creates.
Nothing here imports the conftest (it imports this module).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where the private servers keep their (throw-away) data: memory when there is a tmpfs.
SCRATCH = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, chosen by the kernel (port 0): no two processes
    get the same one, unlike a scan of a fixed range."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def accepts(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the pytest process dies, even by SIGKILL
    (Linux ``PR_SET_PDEATHSIG``), so a killed run leaves no server behind."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class RedisServer:
    """A ``redis-server`` of this process: no persistence, 16 databases, a free port."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed: install it, or point the suite at a Redis "
                "with TEST_REDIS_URL=redis://host:port (tests/README.md)"
            )
        self.directory = Path(tempfile.mkdtemp(prefix="ct-redis-", dir=SCRATCH))
        for _attempt in range(5):
            self.port = free_port()
            args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            args += ["--appendonly", "no", "--dir", str(self.directory), "--databases", "16"]
            self.proc = subprocess.Popen(
                [binary, *args],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
            with contextlib.suppress(RuntimeError):
                _until(
                    lambda: accepts(self.port) or self.proc.poll() is not None,
                    10,
                    "the private redis-server",
                )
            if self.proc.poll() is None and accepts(self.port):
                break
            self.proc.kill()
            self.proc.wait()
        else:
            raise RuntimeError("the private redis-server did not start")
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)


def pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: p.parts)
    return found[-1].parent if found else None


def as_server_user(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run ``command`` as ``postgres`` then."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return command


#: The private cluster's settings: a throw-away cluster, so no durability (a crash test
#: starts a cluster of its own, tests/private_services.py), and room for parallel tests.
FAST_PG_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "shared_buffers": "64MB",
}


class PostgresServer:
    """A PostgreSQL cluster of this process (``initdb`` into tmpfs, trust auth, user
    ``postgres``) on a free port; ``restart()`` for the server-restart test."""

    def __init__(self) -> None:
        found = pg_bin()
        if found is None:
            raise RuntimeError(
                "PostgreSQL server binaries (/usr/lib/postgresql/*/bin) are not installed: "
                "install them, or set TEST_POSTGRES_URL (tests/README.md)"
            )
        self.bin = found
        self.root = Path(tempfile.mkdtemp(prefix="ct-pg-", dir=SCRATCH))
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.data = self.root / "data"
        initdb = [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres"]
        subprocess.run(
            as_server_user([*initdb, "-A", "trust", "--no-sync", "-E", "UTF8"]),
            check=True,
            capture_output=True,
            timeout=120,
        )
        self.port = free_port()
        self.start()
        atexit.register(self.stop)

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        command = [str(self.bin / "pg_ctl"), "-D", str(self.data), *args]
        subprocess.run(as_server_user(command), check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = [f"-p {self.port}", "-c listen_addresses=127.0.0.1"]
        options += [f"-c unix_socket_directories={self.data}"]
        options += [f"-c {name}={value}" for name, value in FAST_PG_SETTINGS.items()]
        log = str(self.root / "server.log")
        self._ctl("start", "-w", "-t", "60", "-l", log, "-o", " ".join(options))

    def restart(self) -> None:
        """Stop (fast: sessions are ended) and start again on the same port."""
        self._ctl("stop", "-m", "fast", "-w", "-t", "60")
        self.start()

    def stop(self) -> None:
        if self.data.exists():
            with contextlib.suppress(subprocess.SubprocessError):
                self._ctl("stop", "-m", "immediate", "-w", "-t", "30")
        shutil.rmtree(self.root, ignore_errors=True)


def migrations_fingerprint() -> str:
    """A short hash of the migration scripts: the name of a template migrated by them, so
    a new or edited migration gets a new template."""
    digest = hashlib.sha1()
    for path in sorted((ROOT / "migrations").rglob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]
