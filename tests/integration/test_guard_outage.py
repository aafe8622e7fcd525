"""Issue 22, item 12: a guard Redis that goes down is said once per process (one WARNING
naming it, masked), not once per call nor never; when it answers again, one line says it
is back. A private ``redis-server`` of the test's own, killed and started again on the
same port (the shared Redis is never touched)."""

from __future__ import annotations

import logging
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from celery_tracked import EnqueueError, Tracker, tracked_task
from celery_tracked.migrate import upgrade
from tests.conftest import wait_for

_SERVER = ("redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
_SERVER += ("--requirepass", "not-shown")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    def __init__(self, directory: Path) -> None:
        self.port = _free_port()
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://:not-shown@127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [*_SERVER, "--port", str(self.port), "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        wait_for(answers, timeout=15, what="the private redis-server")
        client.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is needed")
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def outage_lines(caplog: pytest.LogCaptureFixture, words: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if words in r.getMessage()]


def test_a_guard_outage_is_said_once_then_its_end(
    private_redis: PrivateRedis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database_url = f"sqlite:///{tmp_path / 'tracked.sqlite3'}"
    upgrade(database_url)
    app = Celery("outage", broker="memory://", set_as_current=False)
    app.conf.update(tracked_database_url=database_url, tracked_redis_url=private_redis.url)

    @tracked_task(app=app, name="outage.keyed", idempotency_key="k:{x}")
    def keyed(x: int) -> int:
        return x

    tracker = Tracker.for_app(app)
    try:
        caplog.set_level(logging.DEBUG, logger="celery_tracked")
        keyed.enqueue(x=0)
        private_redis.kill()
        for x in range(1, 4):
            with pytest.raises(EnqueueError, match="idempotency guard"):
                keyed.enqueue(x=x)
        down = outage_lines(caplog, "is unreachable")
        assert len(down) == 1, [r.getMessage() for r in down]
        assert down[0].levelno == logging.WARNING
        assert f"127.0.0.1:{private_redis.port}" in down[0].getMessage()
        assert "not-shown" not in caplog.text
        assert not outage_lines(caplog, "reachable again")

        private_redis.start()
        keyed.enqueue(x=5)
        keyed.enqueue(x=6)
        back = outage_lines(caplog, "reachable again")
        assert len(back) == 1 and back[0].levelno == logging.WARNING
        assert len(outage_lines(caplog, "is unreachable")) == 1
    finally:
        tracker.close()
        Tracker.forget(app)
        app.close()
