"""The task description (issue 14, item 2): one frozen value per task class that every
producer path reads, and the layering around it: the wiring and the services it uses
import neither Celery nor the Celery adapter. No service needed."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from celery import Celery

from celery_tracked import TrackedTask, tracked_task
from celery_tracked.core.calls import CallShape
from celery_tracked.core.description import TaskDescription
from celery_tracked.core.keys import KeyLifetime, KeyRule
from celery_tracked.core.limits import Limits
from celery_tracked.core.options import describe
from celery_tracked.core.redact import Redaction
from celery_tracked.core.retry_policy import RetryPolicy

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "celery_tracked"
#: The Celery adapter: the only modules that may import ``celery`` (by name; ``adapter/calls.py``
#: is left out, as the core has a ``calls.py`` too: import-linter checks the layers).
ADAPTER = {
    "task", "decorator", "signals", "eager", "beat",
    "broker", "stopping", "celery_tracker", "retries", "celery_state", "cli", "adapter",
}  # fmt: skip


def _routed(options: Mapping[str, Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    return "routed"


def _sent(args: Sequence[Any], kwargs: Mapping[str, Any], options: Mapping[str, Any]) -> None:
    raise AssertionError("not sent here")


def a_description(**changes: Any) -> TaskDescription:
    base: dict[str, Any] = {
        "name": "t",
        "job_type": "t",
        "shape": CallShape(lambda doc: doc),
        "route": _routed,
        "send": _sent,
        "retry": RetryPolicy(),
        "keys": KeyRule(),
        "limits": Limits(),
    }
    return TaskDescription(**{**base, **changes})


class _Queue:
    name = "media"


@pytest.mark.parametrize(
    ("options", "static", "expected"),
    [
        ({"queue": "given"}, "declared", "given"),  # the call's queue wins
        ({}, "declared", "declared"),
        ({}, _Queue(), "media"),  # a kombu Queue: its name
        ({"queue": _Queue()}, None, "media"),
        ({}, None, "routed"),  # nobody names one: Celery's routing (the adapter's)
    ],
)
def test_a_calls_queue(options: dict[str, Any], static: Any, expected: str) -> None:
    assert a_description(static_queue=static).queue(options, (), {}) == expected


def test_attempts_and_call_rules_come_from_the_task() -> None:
    described = a_description(retry=RetryPolicy(max_attempts=5), idempotency_key="k:{doc}")
    assert described.attempts(3) == 5
    assert a_description().attempts(3) == 3
    rules = described.call_rules(Redaction(("token",)), 1000)
    assert (rules.task_name, rules.key, rules.redaction.keys) == ("t", "k:{doc}", ("token",))


def test_a_description_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        a_description().name = "other"  # type: ignore[misc]


def test_describe_reads_the_declared_options() -> None:
    def check(arguments: dict[str, Any]) -> None: ...

    class Declared(TrackedTask):  # type: ignore[type-arg]
        tracked_queue = "ocr"
        job_type = "ocr.page"
        validator = staticmethod(check)
        max_attempts = 4
        key_lifetime = "ended"

    checked = (RetryPolicy(max_attempts=4), KeyRule(KeyLifetime.ENDED), Limits())
    described = describe(Declared, "ocr.run", lambda page: page, (_routed, _sent), checked)
    assert (described.name, described.job_type) == ("ocr.run", "ocr.page")
    assert (described.static_queue, described.pins_queue) == ("ocr", True)
    assert described.validator is check  # unwrapped from its staticmethod
    assert described.retry.max_attempts == 4
    assert described.shape.names(1) == ["page"]
    plain = describe(TrackedTask, "plain", lambda: None, (_routed, _sent), checked)
    assert (plain.job_type, plain.static_queue, plain.pins_queue) == ("plain", None, False)


@pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")
def test_a_tracked_task_is_described_once() -> None:
    app = Celery("described", broker="memory://", set_as_current=False)

    @tracked_task(app=app, queue="q", max_attempts=2, key_lifetime="ended", shared=False)
    def work(doc: str) -> str:
        return doc

    described = work.description
    assert described is work.description
    assert described.name == work.name == work.tracked_job_type
    assert described.queue({}, ("d",), {}) == "q" and described.pins_queue
    assert described.retry.max_attempts == 2
    assert described.keys.lifetime is KeyLifetime.ENDED


def _imports(path: pathlib.Path) -> set[str]:
    """The modules ``path`` imports (every import, function-level ones included), as
    top-level package names and, for the package's own, module names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add((node.module or "").split(".")[0])
            elif node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize(
    "module",
    [
        "tracker",
        "services/rerun",
        "services/cancelling",
        "services/bulk",
        "services/pipelines",
        "services/producer",
        "core/description",
        "core/platform",
    ],
)
def test_the_wiring_and_its_services_know_nothing_of_celery(module: str) -> None:
    imported = _imports(PACKAGE / f"{module}.py")
    assert "celery" not in imported
    assert not imported & ADAPTER, f"{module}.py imports the adapter: {imported & ADAPTER}"
