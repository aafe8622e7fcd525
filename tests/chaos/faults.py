"""The soak's processes (two ``celery worker`` nodes and a ``celery beat``) and its faults.

``schedule_faults`` runs in a thread for the soak's window: a pool child killed
(SIGKILL) every 2-6 s, and in each 3-minute cycle, once each: the Redis guard restarted,
a whole worker killed (its process group, SIGKILL; started again 3 s later), PostgreSQL
crashed (``pg_ctl stop -m immediate``; started again 3 s later), the broker restarted.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .servers import Postgres, Redis

CYCLE_S = 180.0


@dataclass
class Node:
    """One ``celery worker`` node; ``environ`` on top of the soak's environment."""

    name: str
    concurrency: int
    environ: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None
    #: killed on purpose, to be started again by the fault that killed it
    held_down: bool = False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def children(self) -> list[int]:
        """The pool's processes: the main process's children (read from ``/proc``)."""
        if not self.running():
            return []
        assert self.proc is not None
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                    found.append(int(entry.name))
        return found


@dataclass
class Fleet:
    root: Path
    started: float
    nodes: dict[str, Node] = field(default_factory=dict)
    beat: subprocess.Popen[bytes] | None = None
    faults: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    here: Path | None = None
    repo: Path | None = None
    #: set by ``stop_all``: no worker is started again after it (the faults' thread may
    #: still run when a SIGTERM ends the soak)
    stopped: bool = False

    def log(self, message: str) -> None:
        print(f"[chaos {time.monotonic() - self.started:7.1f}s] {message}", flush=True)

    def add(self, node: Node) -> None:
        self.nodes[node.name] = node

    def _environ(self, extra: dict[str, str]) -> dict[str, str]:
        assert self.here is not None and self.repo is not None
        environ = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CELERY_TRACKED_", "CHAOS_")) and k != "REDIS_URL"
        }
        environ.update(extra)
        environ["PYTHONPATH"] = os.pathsep.join((str(self.here), str(self.repo)))
        environ["PYTHONUNBUFFERED"] = "1"
        return environ

    def start(self, node: Node) -> None:
        if self.stopped:
            return
        command = [sys.executable, "-m", "celery", "-A", "chaos_app", "worker"]
        command += ["-P", "prefork", "-c", str(node.concurrency), "-Q", "chaos"]
        command += ["-n", f"{node.name}@%h", "-l", "info"]
        command += ["--without-mingle", "--without-gossip", "--without-heartbeat"]
        if node.log_file is None:
            node.log_file = (self.root / f"worker-{node.name}.log").open("ab")
        node.proc = subprocess.Popen(
            command,
            cwd=str(self.here),
            env=self._environ(node.environ),
            stdout=node.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_all(self, here: Path, repo: Path) -> None:
        self.here, self.repo = here, repo
        for node in self.nodes.values():
            self.start(node)
        deadline = time.monotonic() + 60
        for node in self.nodes.values():
            while len(node.children()) < node.concurrency:
                if time.monotonic() > deadline or not node.running():
                    raise RuntimeError(f"worker {node.name} did not start: see its log")
                time.sleep(0.2)
        self.log("workers ready: " + ", ".join(self.nodes))

    def start_beat(self, here: Path, repo: Path, environ: dict[str, str]) -> None:
        command = [sys.executable, "-m", "celery", "-A", "chaos_app", "beat", "-l", "info"]
        command += ["-s", str(self.root / "beat-schedule"), "--pidfile="]
        log = (self.root / "beat.log").open("ab")
        self.beat = subprocess.Popen(
            command,
            cwd=str(here),
            env=self._environ(environ),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def ensure_up(self) -> None:
        with self.lock:
            for node in self.nodes.values():
                if not node.running():
                    self.log(f"worker {node.name} was down: started again")
                    node.held_down = False
                    self.start(node)

    def supervise(self) -> None:
        """Start again a worker that exited by itself, as a supervisor would (counted:
        its log says why)."""
        with self.lock:
            for node in self.nodes.values():
                if node.proc is not None and not node.held_down and not node.running():
                    self.faults["worker exited by itself (restarted)"] += 1
                    self.log(f"worker {node.name} exited by itself: started again")
                    self.start(node)

    def kill_child(self, rng: random.Random) -> None:
        with self.lock:
            candidates = [(n, pid) for n in self.nodes.values() for pid in n.children()]
            if not candidates:
                return
            _, pid = rng.choice(candidates)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                self.faults["pool child SIGKILL"] += 1

    def kill_worker(self, name: str) -> None:
        with self.lock:
            node = self.nodes[name]
            if node.proc is not None and node.running():
                node.held_down = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGKILL)
                node.proc.wait(timeout=10)
                self.faults["whole worker SIGKILL (restarted)"] += 1
                self.log(f"killed worker {name} (its process group)")

    def stop_all(self) -> None:
        with self.lock:  # a restart under way ends first; none after
            self.stopped = True
        for node in self.nodes.values():
            if node.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(timeout=15)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGKILL)
                node.proc.wait(timeout=10)
            if node.log_file is not None:
                node.log_file.close()
                node.log_file = None
        if self.beat is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.beat.pid, signal.SIGKILL)
            self.beat.wait(timeout=10)
            self.beat = None

    def logs(self) -> dict[str, str]:
        """Every log the soak's processes wrote, by file name."""
        return {
            path.name: path.read_text(errors="replace") for path in sorted(self.root.glob("*.log"))
        }


def _restart_redis(fleet: Fleet, server: Redis, label: str) -> None:
    server.kill()
    fleet.log(f"{label} redis-server killed (its data lost)")
    time.sleep(2)
    server.start()
    fleet.faults[f"{label} Redis restart (data lost)"] += 1


def _restart_postgres(fleet: Fleet, pg: Postgres) -> None:
    pg.crash()
    fleet.log("PostgreSQL crashed (pg_ctl stop -m immediate)")
    time.sleep(3)
    pg.start()
    fleet.faults["PostgreSQL crash + restart"] += 1
    fleet.log("PostgreSQL started again")


def _kill_and_restart_worker(fleet: Fleet, name: str) -> None:
    fleet.kill_worker(name)
    time.sleep(3)
    fleet.ensure_up()


def schedule_faults(
    fleet: Fleet, pg: Postgres, guard: Redis, broker: Redis, window_s: float, seed: int
) -> threading.Thread:
    """Start the faults' thread for ``window_s`` seconds; the thread (join it)."""
    rng = random.Random(seed + 1)
    big: list[tuple[float, str, Any]] = []
    cycles = max(1, round(window_s / CYCLE_S))
    span = window_s / cycles
    for cycle in range(cycles):
        base = cycle * span
        node = rng.choice(sorted(fleet.nodes))
        big += [
            (base + 0.15 * span, "guard", lambda: _restart_redis(fleet, guard, "guard")),
            (base + 0.30 * span, "worker", lambda n=node: _kill_and_restart_worker(fleet, n)),
            (base + 0.50 * span, "postgres", lambda: _restart_postgres(fleet, pg)),
            (base + 0.70 * span, "broker", lambda: _restart_redis(fleet, broker, "broker")),
        ]

    def run() -> None:
        start = time.monotonic()
        todo = sorted(big, key=lambda item: item[0])
        next_kill = start + rng.uniform(2, 6)
        while time.monotonic() - start < window_s:
            now = time.monotonic()
            if todo and now - start >= todo[0][0]:
                _, what, action = todo.pop(0)
                try:
                    action()
                except Exception as exc:  # a fault that failed is reported, not fatal
                    fleet.log(f"fault {what} failed: {exc!r}")
                    fleet.faults[f"fault failed: {what}"] += 1
            elif now >= next_kill:
                fleet.kill_child(rng)
                next_kill = now + rng.uniform(2, 6)
            fleet.supervise()
            time.sleep(0.1)
        fleet.log(f"faults done: {dict(fleet.faults)}")

    thread = threading.Thread(target=run, name="chaos-faults", daemon=True)
    thread.start()
    return thread
