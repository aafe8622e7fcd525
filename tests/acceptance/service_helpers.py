"""Helpers of test_example_service.py: a loopback SMTP mailbox (aiosmtpd) and the
example service's real ``celery worker`` processes."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from email import message_from_bytes
from pathlib import Path
from typing import Any

import anyio.from_thread
import httpx
from aiosmtpd.controller import Controller

from example_project.service.config import ServiceConfig
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parent.parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def black_hole() -> Iterator[int]:
    """A port on loopback that accepts connections (the kernel's backlog) and never
    answers: a broker or a database that hangs. Yields the port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield int(sock.getsockname()[1])


class Mailbox:
    """An aiosmtpd handler: every DATA it received (``received``, by Message-ID) and the
    mailbox a reader sees (``delivered``: one message per Message-ID, as a receiving
    mailbox keeps it). With ``hold_first``, the first DATA is recorded and then held
    (no answer) until :meth:`release`, so a test can kill the sender in between."""

    def __init__(self, hold_first: bool = False) -> None:
        self.received: list[str] = []
        self.delivered: dict[str, Any] = {}
        self._hold = hold_first
        self._released = threading.Event()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.content)
        message_id = str(message["Message-ID"])
        self.received.append(message_id)
        self.delivered.setdefault(message_id, message)
        if self._hold and len(self.received) == 1:
            while not self._released.is_set():
                await asyncio.sleep(0.02)
        return "250 OK"

    def release(self) -> None:
        self._released.set()


class SmtpServer:
    """A real SMTP server on loopback, serving a :class:`Mailbox`."""

    def __init__(self, mailbox: Mailbox) -> None:
        self.mailbox = mailbox
        self.port = free_port()
        self.controller = Controller(mailbox, hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> SmtpServer:
        self.controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.mailbox.release()
        self.controller.stop()


def service_environ(config: ServiceConfig) -> dict[str, str]:
    """The environment of the service's processes, in the seed's names."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_TRACKED_", "JOB_QUEUE_", "SERVICE_", "SMTP_"))
        and k not in ("REDIS_URL", "DATABASE_URL", "CELERY_BROKER_URL")
    }
    environ.update(
        {
            "REDIS_URL": config.redis_url,
            "DATABASE_URL": config.database_url,
            "CELERY_BROKER_URL": config.broker_url,
            "SMTP_HOST": config.smtp_host,
            "SMTP_PORT": str(config.smtp_port),
            "JOB_QUEUE_DEFAULT_BACKOFF_MS": "200",
            "JOB_QUEUE_COURSE_GEN_LIMITER_MS": "1",
            "COURSE_AI_LATENCY_MS": "0",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
            ),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return environ


class ServiceWorker:
    """``celery -A example_project.service.worker worker`` in its own process group."""

    def __init__(self, config: ServiceConfig, queues: str, log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        cmd = [sys.executable, "-m", "celery", "-A", "example_project.service.worker"]
        cmd += ["worker", "-P", "prefork", "-c", "1", "-Q", queues, "-l", "info"]
        cmd += ["--without-mingle", "--without-gossip", "--without-heartbeat"]
        self.proc = subprocess.Popen(
            cmd,
            cwd=str(ROOT),
            env=service_environ(config),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(
            lambda: " ready." in self.log() or self.proc.poll() is not None,
            timeout=30,
            what="the service worker to be ready",
        )
        assert self.proc.poll() is None, f"the worker exited:\n{self.log()}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def children(self) -> list[int]:
        """The pids of its pool processes."""
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(pid) for pid in path.read_text().split()]

    def stop(self) -> None:
        """A cold shutdown (SIGQUIT): the test's database and Redis DB go away after it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGQUIT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()


class AsgiClient:
    """A synchronous face on ``httpx.AsyncClient(transport=httpx.ASGITransport(app))``:
    each request runs on an event loop in a portal thread (as Starlette's TestClient does)."""

    def __init__(self, portal: Any, client: httpx.AsyncClient) -> None:
        self.portal = portal
        self.client = client

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        response: httpx.Response = self.portal.call(
            functools.partial(self.client.request, method, url, **kwargs)
        )
        return response

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)


@contextlib.contextmanager
def asgi_client(app: Any) -> Iterator[AsgiClient]:
    """An :class:`AsgiClient` on the ASGI ``app``, in process (no server, no port)."""
    with anyio.from_thread.start_blocking_portal() as portal:

        async def make() -> httpx.AsyncClient:
            return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc")

        client = portal.call(make)
        try:
            yield AsgiClient(portal, client)
        finally:
            portal.call(client.aclose)
