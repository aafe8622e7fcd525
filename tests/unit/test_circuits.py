"""Circuit breakers (issue 27, item 4), no service: the options checked at decoration, which
errors count, and the worker's hook, the runner and the probe pass on the in-memory store:
failures open the circuit, its deliveries are held without an attempt, the pass half-opens
it after the cool-down and sends one probe, whose end closes it (releasing the held jobs)
or opens it again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from celery_tracked.adapter.celery_signals import CELERY_SIGNALS
from celery_tracked.backends.memory import MemoryStore
from celery_tracked.core.circuits import CLOSED, HALF_OPEN, OPEN, CircuitRule, circuit_rule, held_by
from celery_tracked.core.errors import InvalidCircuit, InvalidTaskOption, StoreError, Unrecoverable
from celery_tracked.core.hooks import Delivery, HookChain
from celery_tracked.core.jobs import Job, JobStatus
from celery_tracked.core.messages import TrackedHeaders
from celery_tracked.core.outcomes import Skipped
from celery_tracked.core.redact import Redaction
from celery_tracked.core.run import Run
from celery_tracked.core.settings import Settings
from celery_tracked.services.circuits import Circuits, ProbePass
from celery_tracked.services.lease import LeaseKeeper
from celery_tracked.services.maintenance import Parts
from celery_tracked.services.runner import Runner
from tests.unit.job_rows import a_job

RULE = CircuitRule("stripe", threshold=2, window_s=60, cooldown_s=0.2)


@pytest.mark.parametrize(
    ("options", "bad"),
    [
        ({"circuit_threshold": 3}, "circuit_threshold"),
        ({"circuit": ""}, "circuit"),
        ({"circuit": 5}, "circuit"),
        ({"circuit": "x" * 300}, "circuit"),
        ({"circuit": "s", "circuit_threshold": 0}, "circuit_threshold"),
        ({"circuit": "s", "circuit_cooldown_s": -1}, "circuit_cooldown_s"),
        ({"circuit": "s", "circuit_window_s": "60"}, "circuit_window_s"),
        ({"circuit": "s", "circuit_errors": "OSError"}, "circuit_errors"),
        ({"circuit": "s", "circuit_ignore": (ValueError, 3)}, "circuit_ignore"),
    ],
)
def test_bad_circuit_options_are_refused_by_name(options: dict[str, Any], bad: str) -> None:
    with pytest.raises(InvalidTaskOption) as raised:
        circuit_rule(options)
    assert raised.value.setting == bad


def test_a_circuit_rule_and_what_counts() -> None:
    assert circuit_rule({}) is None
    rule = circuit_rule({"circuit": "s", "circuit_errors": OSError, "circuit_threshold": 3})
    assert rule == CircuitRule("s", threshold=3, errors=(OSError,))
    assert rule.counts(ConnectionError("down")) and rule.counts(TimeoutError())
    assert not rule.counts(RuntimeError("not OSError")) and not rule.counts(None)
    default = CircuitRule("s")
    assert default.counts(RuntimeError("boom")) and default.counts(ConnectionError())
    for never in (Unrecoverable("bad"), ValueError("bad input"), TypeError(), StoreError("x")):
        assert not default.counts(never)
    assert not CircuitRule("s", ignore=(ConnectionError,)).counts(ConnectionError())


def test_the_task_options_reach_its_description() -> None:
    from celery import Celery

    from celery_tracked import tracked_task

    app = Celery("t", broker="memory://", set_as_current=False)

    @tracked_task(
        app=app, name="t.charge", circuit="stripe", circuit_threshold=2, circuit_errors=OSError
    )
    def charge(x: int) -> int:
        return x

    @tracked_task(app=app, name="t.plain")
    def plain(x: int) -> int:
        return x

    app.finalize()
    found = app.tasks["t.charge"].description.circuit
    assert found == CircuitRule("stripe", threshold=2, errors=(OSError,))
    assert app.tasks["t.plain"].description.circuit is None
    with pytest.raises(InvalidTaskOption, match="circuit_cooldown_s"):
        tracked_task(app=app, name="t.bad", circuit="s", circuit_cooldown_s=0)(plain.run)


@dataclass
class World:
    store: MemoryStore
    runner: Runner
    gate: Circuits
    probe: ProbePass
    published: list[Job] = field(default_factory=list)

    def run(self, job_id: str, body: Any = None, inline: bool = False) -> Any:
        job = self.store.get(job_id)
        assert job is not None
        headers = TrackedHeaders(job_id, job_id, None, "q", revision=job.revision)
        run = Run(
            headers=headers,
            task_name="app.charge",
            job_type="charge",
            queue="q",
            worker="w1@host",
            backoff_base_ms=1,
            secrets=lambda: [],
            signals=CELERY_SIGNALS,
            inline=inline,
        )
        return self.runner.run(run, body or (lambda _: "ok"))


def _raise(error: BaseException) -> Any:
    def body(_: Any) -> None:
        raise error

    return body


@pytest.fixture
def world() -> Iterator[World]:
    store = MemoryStore()
    keeper = LeaseKeeper(store, lease_seconds=60)
    settings = Settings(redis_url="memory://", default_backoff_ms=0)
    found: list[Job] = []
    parts = Parts(settings, store, None, HookChain(), None, found.append, lambda *_: True)  # type: ignore[arg-type]
    probe = ProbePass(store, 60.0, parts)
    rules = {"app.charge": RULE}
    masking = Redaction(("token", "api_key"))
    gate = Circuits(store, rules.get, lambda: {"stripe"}, probe.release_held, 60.0, masking)
    runner = Runner(store, keeper, HookChain([gate]), settings)
    for n in range(1, 7):
        store.put(a_job(id=f"j-{n}", job_type="charge", task_name="app.charge", max_attempts=5))
    yield World(store, runner, gate, probe, found)
    keeper.stop()


def _state(world: World) -> str:
    found = world.store.circuit("stripe")
    return CLOSED if found is None else found.state


def _wait_half_open(world: World) -> None:
    deadline = time.monotonic() + 10
    while _state(world) != HALF_OPEN and time.monotonic() < deadline:
        time.sleep(0.05)
        world.probe.run()


def test_failures_open_it_and_its_deliveries_are_held_without_an_attempt(world: World) -> None:
    world.run("j-1", _raise(Unrecoverable("bad card")))  # never counted
    world.run("j-2", _raise(ValueError("bad input")))
    assert _state(world) == CLOSED and world.store.circuit("stripe") is None
    world.run("j-3", _raise(ConnectionError("down")))
    world.run("j-4", _raise(ConnectionError("down, api_key=sk_1")))
    found = world.store.circuit("stripe")
    assert found is not None and found.state == OPEN and found.opened_count == 1
    assert found.reason is not None and "ConnectionError" in found.reason
    assert "sk_1" not in found.reason  # masked: shown by circuits(), logged
    ran: list[str] = []
    verdict = world.run("j-5", lambda _: ran.append("j-5"))
    assert isinstance(verdict, Skipped) and "held" in verdict.reason and ran == []
    job = world.store.get("j-5")
    assert job is not None and job.status is JobStatus.PENDING and job.attempts_made == 0
    assert job.locked_by == held_by("stripe") and job.published_at is None
    assert [e.event for e in world.store.events("j-5")][-1] == "circuit_open"
    assert world.gate.circuits()[0].held == 1


def test_the_probe_closes_it_and_releases_the_held_jobs(world: World) -> None:
    for job_id in ("j-1", "j-2"):
        world.run(job_id, _raise(ConnectionError("down")))
    for job_id in ("j-3", "j-4", "j-5"):
        assert isinstance(world.run(job_id), Skipped)
    world.probe.run()
    assert _state(world) == OPEN and world.published == []  # still cooling down
    _wait_half_open(world)
    assert [j.id for j in world.published] == ["j-3"]  # held longest: the probe
    assert [e.event for e in world.store.events("j-3")][-1] == "circuit_probe"
    assert isinstance(world.run("j-6"), Skipped)  # not the probe: held
    ran: list[str] = []
    world.run("j-3", lambda _: ran.append("j-3"))
    assert ran == ["j-3"]
    found = world.store.circuit("stripe")
    assert found is not None and found.state == CLOSED and found.probes == 1
    released = sorted(j.id for j in world.published[1:])
    assert released == ["j-4", "j-5", "j-6"]  # the held jobs, published
    assert world.store.circuit_held("stripe") == []
    job = world.store.get("j-4")
    assert job is not None and job.attempts_made == 0


def test_a_failed_probe_opens_it_again_and_the_next_probe_is_another_job(world: World) -> None:
    for job_id in ("j-1", "j-2"):
        world.run(job_id, _raise(ConnectionError("down")))
    for job_id in ("j-3", "j-4"):
        world.run(job_id)
    _wait_half_open(world)
    world.run("j-3", _raise(ConnectionError("still down")))
    found = world.store.circuit("stripe")
    assert found is not None and found.state == OPEN and found.opened_count == 2
    job = world.store.get("j-3")
    assert job is not None and job.status is JobStatus.RETRYING and job.attempts_made == 1
    world.run("j-3")  # its retry: held again, as the newest
    _wait_half_open(world)
    assert [j.id for j in world.published] == ["j-3", "j-4"]


def test_by_hand_every_job_is_held_until_closed(world: World) -> None:
    with pytest.raises(InvalidCircuit, match="unknown circuit 'nope'"):
        world.gate.open("nope")
    with pytest.raises(InvalidCircuit, match="reason"):
        world.gate.open("stripe", reason="x" * 3000)
    opened = world.gate.open("stripe", reason="incident, token=t0k", by="ops")
    assert opened.manual and "t0k" not in (opened.reason or "")
    for job_id in ("j-1", "j-2"):
        assert isinstance(world.run(job_id), Skipped)
    world.probe.run()
    assert world.published == [] and _state(world) == OPEN  # never half-opens by itself
    assert world.gate.close("stripe") and not world.gate.close("stripe")
    assert sorted(j.id for j in world.published) == ["j-1", "j-2"]


def test_a_run_in_the_callers_process_neither_waits_nor_counts(world: World) -> None:
    for job_id in ("j-1", "j-2", "j-3"):
        world.run(job_id, _raise(ConnectionError("down")), inline=True)
    assert world.store.circuit("stripe") is None
    world.gate.open("stripe")
    ran: list[str] = []
    world.run("j-4", lambda _: ran.append("j-4"), inline=True)
    assert ran == ["j-4"]


def test_a_task_without_a_circuit_is_not_read(world: World) -> None:
    class NoReads(MemoryStore):
        def circuit(self, name: str) -> Any:
            raise AssertionError("read")

    gate = Circuits(NoReads(), {}.get, set, lambda: 0, 60.0)
    assert gate.before_claim(Delivery("j-1", "t", "q", "app.other")) is None
    assert gate.before_claim(Delivery("j-1", "t", "q", "app.charge", inline=True)) is None
