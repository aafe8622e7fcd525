"""The execution lease: who holds a run, whether the holder lives, renewal, and diagnosis.

A run holds its job through the row (``locked_by`` names the process, ``locked_until`` the
expiry, ``attempts_made`` the fence). ``diagnose`` is the one judgement of a lease seen by
someone else (a duplicate delivery today, a stalled-job reaper later): still held, or lapsed
(expired, or its holder on this host is dead). Knows nothing of Celery.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from .jobs import Claim, Job, utcnow

logger = logging.getLogger("celery_tracked")


def _pid_namespace() -> str:
    """This process's PID namespace: processes of containers sharing a hostname differ."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "-"


#: This host (hostname and PID namespace): pids are only comparable within it.
HOST_ID = f"{socket.gethostname()}:{_pid_namespace()}"


def owner_id(pid: int | None = None) -> str:
    """``locked_by`` of a process of this host (default: this process)."""
    return f"{HOST_ID}:{os.getpid() if pid is None else pid}"


def process_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a killed child not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def dead_holder(
    locked_by: str | None,
    *,
    host_id: str,
    pid: int,
    alive: Callable[[int], bool],
    running_here: bool,
) -> str | None:
    """``locked_by`` when it names a process of this host that no longer runs the job.

    ``running_here`` says whether this process (``pid``) still runs the job itself.
    Holders on other hosts are never judged: only their lease expiry counts.
    """
    if not locked_by:
        return None
    host, _, pid_text = locked_by.rpartition(":")
    if host != host_id or not pid_text.isdigit():
        return None
    holder = int(pid_text)
    if holder == pid:
        return None if running_here else locked_by
    return None if alive(holder) else locked_by


@dataclass(frozen=True)
class Diagnosis:
    """A processing job's lease as seen by someone who does not hold it."""

    lapsed: bool
    #: seconds until a live lease expires (0 when lapsed)
    remaining_s: float
    #: ``locked_by`` of a dead holder (fences the takeover to exactly that holder)
    stale_owner: str | None
    why: str


def diagnose(job: Job, now: datetime, stale_owner: str | None) -> Diagnosis:
    """Is the lease of ``job`` (processing) still held? ``stale_owner`` from ``dead_holder``."""
    until = job.locked_until
    if stale_owner is not None:
        return Diagnosis(True, 0.0, stale_owner, "its worker process died")
    if until is None or until <= now:
        return Diagnosis(True, 0.0, None, "its lease expired")
    remaining = (until - now).total_seconds()
    return Diagnosis(False, remaining, None, f"attempt {job.attempts_made} is running elsewhere")


class Renewer(Protocol):
    def renew(self, claims: Sequence[Claim], until: datetime) -> int: ...


class LeaseKeeper:
    """Renews the leases of the attempts running in this process, every third of a lease.

    One daemon thread per process, started on first use (after any fork).
    """

    def __init__(self, store: Renewer, lease_seconds: float) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self._active: dict[str, Claim] = {}
        self._lock = threading.Lock()
        self._pid = 0
        self._stop = threading.Event()

    def lease_until(self) -> datetime:
        return utcnow() + timedelta(seconds=self.lease_seconds)

    def is_active(self, job_id: str) -> bool:
        """True while this process runs ``job_id`` (between its claim and its outcome)."""
        with self._lock:
            return job_id in self._active and self._pid == os.getpid()

    def dead_holder(self, job: Job) -> str | None:
        """``job.locked_by`` when that process (on this host) no longer runs it."""
        return dead_holder(
            job.locked_by,
            host_id=HOST_ID,
            pid=os.getpid(),
            alive=process_alive,
            running_here=self.is_active(job.id),
        )

    @contextmanager
    def holding(self, claim: Claim) -> Iterator[None]:
        """Renew ``claim``'s lease while the block runs."""
        self._ensure_thread()
        with self._lock:
            self._active[claim.job_id] = claim
        try:
            yield
        finally:
            with self._lock:
                if self._active.get(claim.job_id) is claim:
                    del self._active[claim.job_id]

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self._active = {}
            self._stop = threading.Event()
            thread = threading.Thread(target=self._run, name="celery-tracked-leases", daemon=True)
            thread.start()
            self._pid = os.getpid()

    def _run(self) -> None:
        interval = self.lease_seconds / 3
        stop = self._stop
        while not stop.wait(interval):
            with self._lock:
                claims = list(self._active.values())
            if not claims:
                continue
            try:
                self.store.renew(claims, self.lease_until())
            except Exception as exc:  # keep renewing; a lapsed lease only allows a takeover
                logger.warning("could not renew %d lease(s): %s", len(claims), exc)

    def stop(self) -> None:
        self._stop.set()
