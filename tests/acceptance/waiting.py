"""``Tracker.wait`` in a thread. With the ``slow_reread`` fixture (the periodic re-read
raised to ``REREAD_S``) only a notification can wake it quickly."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from tests.conftest import wait_for

REREAD_S = 60.0
#: how long after the job ended a notified waiter must have returned (a re-read: 60 s)
PROMPT_S = 5.0


class Waiter:
    """``tracker.wait(job_id)`` in a thread; records the outcome and when it came."""

    def __init__(
        self, tracker: Any, client: redis.Redis, job_id: str, timeout: float = REREAD_S - 10
    ) -> None:
        self.tracker = tracker
        self.client = client  # the Redis of the tracker's notifications
        self.job_id = job_id
        self.result: Any = None
        self.error: BaseException | None = None
        self.ended_at: float | None = None
        self._thread = threading.Thread(target=self._run, args=(timeout,), daemon=True)

    @classmethod
    def on(cls, env: Any, job_id: str) -> Waiter:
        """A started waiter on the test's own tracker."""
        return cls(env.tracker, env.redis, job_id).start()

    def _run(self, timeout: float) -> None:
        try:
            self.result = self.tracker.wait(self.job_id, timeout=timeout)
        except BaseException as exc:  # examined by the test
            self.error = exc
        self.ended_at = time.time()

    def start(self) -> Waiter:
        """Start waiting; return once the waiter listens on a channel naming the job
        (``wait`` subscribes before it reads the row)."""
        self._thread.start()
        wait_for(
            lambda: any(self.job_id in c.decode() for c in self.client.pubsub_channels()),
            timeout=10,
            what=f"the waiter of {self.job_id} to subscribe",
        )
        return self

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"wait({self.job_id}) still blocked after {timeout}s"

    def latency(self) -> float:
        """Seconds between the job's end (``finished_at``, written on this host) and the
        wait's return."""
        job = self.tracker.get_job(self.job_id)
        assert job.finished_at is not None and self.ended_at is not None
        return self.ended_at - job.finished_at.timestamp()
