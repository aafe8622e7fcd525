"""The execution lease: who holds a run, whether the holder lives, renewal, and diagnosis.

A run holds its job through the row (``locked_by`` names the process, ``locked_until`` the
expiry, ``attempts_made`` the fence); the relay holds a pending row the same way while it
publishes the row's message. ``diagnose`` is the one judgement of a run's lease seen by
someone else (a duplicate delivery, the stalled-job reaper): still held, or lapsed
(expired, or its holder on this host is dead); ``waiting_hold`` says why a waiting row is
not claimable yet (the relay's claim, or a ``retrying`` row's ``not_before``). Knows
nothing of Celery.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core.jobs import CLAIMABLE, Claim, Job, JobStatus
from ..core.limits import SLOT_HANDED
from ..core.ports import LeaseStore

logger = logging.getLogger("celery_tracked")


def _pid_namespace() -> str:
    """This process's PID namespace: processes of containers sharing a hostname differ."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "-"


def _boot_id() -> str:
    """The kernel's id of this boot: two hosts (cloned VMs, containers given one fixed
    hostname) share a hostname and the root PID namespace's inode, never a boot id."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            return boot.read().strip()
    except OSError:
        return ""


#: Empty where the kernel has no boot id: then no holder is ever judged dead by its pid.
BOOT_ID = _boot_id()
#: This host (hostname, boot, PID namespace): pids are only comparable within it.
HOST_ID = f"{socket.gethostname()}:{BOOT_ID or '-'}:{_pid_namespace()}"


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


def diagnose(job: Job, now: datetime, stale_owner: str | None, grace_s: float = 0.0) -> Diagnosis:
    """Is the lease of ``job`` (processing) still held? ``now`` is the database's clock,
    ``stale_owner`` from ``dead_holder``; a lease is taken over ``grace_s`` after expiry."""
    until = job.locked_until
    if stale_owner is not None:
        return Diagnosis(True, 0.0, stale_owner, "its worker process died")
    if until is None:
        return Diagnosis(True, 0.0, None, "its lease was released")
    remaining = (until - now).total_seconds() + grace_s
    if remaining < 0:
        return Diagnosis(True, 0.0, None, "its lease expired")
    return Diagnosis(False, remaining, None, f"attempt {job.attempts_made} is running elsewhere")


#: A delivery that finds the relay publishing its row looks again this soon: the relay lets
#: the row go as soon as its publish returns; only a relay that died meanwhile holds it for
#: its whole claim (``relay.CLAIM_S``).
RELAY_RECHECK_S = 0.2


@dataclass(frozen=True)
class Hold:
    """Why a waiting (``pending``, ``retrying``) row was not claimed: wait ``countdown_s``."""

    countdown_s: float
    why: str


def waiting_hold(job: Job, now: datetime, keyed: bool = False) -> Hold | None:
    """Why a delivery could not claim the waiting ``job`` at ``now`` (the database's clock):
    the relay holds it while it publishes its message (``locked_until``), or its next
    attempt (a retry's backoff, a pending job's ``countdown``/``eta``) is not due
    (``not_before``: the delivery waits the rest of it, so a worker whose clock runs ahead
    of the database's waits once more, not in a loop; a ``keyed`` job whose due time
    passed was refused by its concurrency key instead). None: neither (a concurrent claim
    took it)."""
    if job.status not in CLAIMABLE:
        return None
    handed = keyed and job.locked_by == SLOT_HANDED  # its concurrency key decides
    if job.locked_until is not None and job.locked_until > now and not handed:
        left = (job.locked_until - now).total_seconds()
        why = f"the relay is publishing its message (its claim ends in {left:.1f} s at most)"
        return Hold(RELAY_RECHECK_S, why)
    if job.not_before is not None:
        due = (job.not_before - now).total_seconds()
        retrying = job.status is JobStatus.RETRYING
        if due > 0 or (retrying and not keyed):  # the rest: a worker ahead of the database
            what = "its backoff" if retrying else "its countdown/eta"
            return Hold(max(0.2, due), f"{what} is not due")
    return None


#: What the lease keeper asks of the store.
Renewer = LeaseStore

#: A run stops itself once no renewal has proven its lease for this share of the lease.
PROOF_SHARE = 0.75
#: Another delivery takes over only this share of the lease after ``locked_until``.
GRACE_SHARE = 0.25
#: How long the renewal tried before a run stops itself for an unproven lease may take.
LAST_RENEWAL_S = 2.0


def can_stop_process() -> bool:
    """True when ending this process ends only the calling run: the body runs in the main
    thread (a prefork pool child, the solo pool) and no green threads share the process."""
    if threading.current_thread() is not threading.main_thread():
        return False
    return not any(name in sys.modules for name in ("gevent", "eventlet"))


def kill_this_process(why: str) -> None:
    """End this process the way Celery's hard time limit ends a pool child (``SIGKILL``):
    no further step of the body, no write; the message is redelivered."""
    logger.critical("stopping process %d: %s", os.getpid(), why)
    for handler in logger.handlers + logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class _Held:
    """A run of this process under its lease."""

    claim: Claim
    #: monotonic time the last statement that proved the lease (claim or renewal) was sent
    proven_at: float
    stoppable: bool
    body_ended: bool = False
    lost: bool = False
    told: bool = False


class LeaseKeeper:
    """Renews the leases of the runs of this process, and stops a run that lost its lease.

    A renewal thread renews every third of a lease; a renewal that fails (database briefly
    unreachable) is retried sooner. A watchdog thread, and a ``SIGCONT`` handler for a
    process resumed after a pause, stop a run whose body is still running once its lease
    was taken over or has gone unproven for ``PROOF_SHARE`` of the lease: by ending the
    process where that ends only this run (``can_stop_process``), else (threads) by
    logging it: its fenced outcome write will match nothing. Threads start on first use
    (after any fork).
    """

    def __init__(
        self,
        store: Renewer,
        lease_seconds: float,
        stop: Callable[[str], None] = kill_this_process,
    ) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self._stop_process = stop
        self._active: dict[str, _Held] = {}
        self._lock = threading.Lock()
        self._pid = 0
        self._resume_pid = 0
        self._stop = threading.Event()

    @property
    def proof_seconds(self) -> float:
        """How long a run may go without proving its lease before it stops."""
        return self.lease_seconds * PROOF_SHARE

    @property
    def grace_seconds(self) -> float:
        """How long after its expiry a lease may be taken over."""
        return self.lease_seconds * GRACE_SHARE

    def is_active(self, job_id: str) -> bool:
        """True while this process runs ``job_id`` (between its claim and its outcome)."""
        with self._lock:
            return job_id in self._active and self._pid == os.getpid()

    def dead_holder(self, job: Job) -> str | None:
        """``job.locked_by`` when that process (on this host) no longer runs it."""
        if not BOOT_ID:  # this host cannot be told apart from a clone: expiry decides
            return None
        return dead_holder(
            job.locked_by,
            host_id=HOST_ID,
            pid=os.getpid(),
            alive=process_alive,
            running_here=self.is_active(job.id),
        )

    @contextmanager
    def holding(self, claim: Claim, since: float) -> Iterator[None]:
        """Renew ``claim``'s lease while the block runs; ``since`` is the monotonic time
        the claim was sent (the lease is proven from then)."""
        self._ensure_threads()
        held = _Held(claim, since, can_stop_process())
        if held.stoppable:
            self._on_resume()
        with self._lock:
            self._active[claim.job_id] = held
        try:
            yield
        finally:
            with self._lock:
                if self._active.get(claim.job_id) is held:
                    del self._active[claim.job_id]

    def body_ended(self, claim: Claim) -> None:
        """The body returned or raised: from now on only the fenced outcome write remains,
        and nothing stops the run any more."""
        with self._lock:
            held = self._active.get(claim.job_id)
            if held is not None and held.claim is claim:
                held.body_ended = True

    def _ensure_threads(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self._active = {}
            self._stop = threading.Event()
            for name, target in (("leases", self._renew_loop), ("lease-watch", self._watch)):
                thread = threading.Thread(target=target, name=f"celery-tracked-{name}")
                thread.daemon = True
                thread.start()
            self._pid = os.getpid()

    def _on_resume(self) -> None:
        """Check the leases as soon as a paused process continues (``SIGCONT``): Python
        runs the handler in the main thread, before the body's next step."""
        if self._resume_pid == os.getpid():
            return
        previous = signal.getsignal(signal.SIGCONT)

        def continued(signum: int, frame: Any) -> None:
            self.check()
            if callable(previous):
                previous(signum, frame)

        signal.signal(signal.SIGCONT, continued)
        self._resume_pid = os.getpid()

    def _renew_loop(self) -> None:
        interval = self.lease_seconds / 3
        stop, wait = self._stop, interval
        while not stop.wait(wait):
            with self._lock:
                running = list(self._active.values())
            wait = interval
            for held in running:
                sent = time.monotonic()
                try:
                    held.lost = held.lost or not self.store.renew(held.claim, self.lease_seconds)
                except Exception as exc:  # retried: only an unprovable lease stops the run
                    logger.warning("could not renew the lease of %s: %s", held.claim.job_id, exc)
                    wait = min(interval, self.lease_seconds / 10)
                    continue
                if not held.lost:
                    held.proven_at = max(held.proven_at, sent)
            self.check()

    def _watch(self) -> None:
        while not self._stop.wait(min(0.25, self.lease_seconds / 10)):
            self.check()

    def check(self) -> None:
        """Stop each run whose body still runs and whose lease was lost or is unproven."""
        now = time.monotonic()
        with self._lock:
            running = [h for h in self._active.values() if not h.body_ended]
        for held in running:
            unproven = now - held.proven_at >= self.proof_seconds
            if not (held.lost or unproven) or held.told:
                continue
            if not held.lost and self._renewed_at_last(held):
                continue  # proven now (a body that held the GIL kept the renewals away)
            why = (
                f"job {held.claim.job_id} attempt {held.claim.attempt} "
                + ("lost its lease to another attempt" if held.lost else "cannot prove its lease")
                + f" (last proven {now - held.proven_at:.1f} s ago)"
            )
            if held.stoppable:
                self._stop_process(why)
            elif not held.told:
                held.told = True
                logger.error("%s; it runs on in its thread, its outcome will not be written", why)

    def _renewed_at_last(self, held: _Held) -> bool:
        """One fenced renewal before a run stops itself for an unproven lease: a body
        that held the GIL (a long C call) kept the renewal thread from running, but its
        lease may well be intact. True: renewed (proven from when it was sent). False: not
        held any more (``lost``), or the renewal failed or took over ``LAST_RENEWAL_S``.

        Run in a thread of its own, waited for with a timeout: ``check`` may be running
        in a ``SIGCONT`` handler that interrupted the body inside the store's own code."""
        sent = time.monotonic()
        answer: list[bool] = []

        def renew() -> None:
            try:
                answer.append(self.store.renew(held.claim, self.lease_seconds))
            except Exception as exc:
                logger.warning("could not renew the lease of %s: %s", held.claim.job_id, exc)

        thread = threading.Thread(target=renew, name="celery-tracked-last-renewal", daemon=True)
        thread.start()
        thread.join(max(LAST_RENEWAL_S, self.lease_seconds / 4))
        if not answer:
            return False
        if not answer[0]:
            held.lost = True
            return False
        held.proven_at = max(held.proven_at, sent)
        return True

    def stop(self) -> None:
        self._stop.set()
