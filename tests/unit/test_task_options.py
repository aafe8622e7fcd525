"""Bad tracked options are refused when the task is declared (issue 6, item 3), whichever
way the task class is made: ``@tracked_task``, ``@app.task(base=TrackedTask)``, a
subclass. A worker never meets them halfway through a job."""

from __future__ import annotations

import math
from typing import Any

import pytest
from celery import Celery

from celery_tracked import ConfigurationError, InvalidTaskOption, TrackedTask, tracked_task

BAD = [
    ("backoff_ms", "5s"),
    ("backoff_ms", -1),
    ("backoff_ms", 1.5),
    ("backoff_ms", True),
    ("max_attempts", 0),
    ("max_attempts", "3"),
    ("job_type", ""),
    ("job_type", 7),
    ("idempotency_key", 12),
    ("idempotency_key", "k:{x"),
    ("validator", "not callable"),
    ("validator", int),
    ("validator", lambda **named: None),
    # issue 27 item 4: a circuit's name
    ("circuit", ""),
    ("circuit", 5),
    # issue 12 item 10: numeric options have ranges (docs/configuration.md, "Ranges")
    ("max_attempts", 2**31),
    ("max_attempts", 1.0),
    ("backoff_ms", 10**12),
    ("max_retries", 2**31),
    ("max_retries", -1),
    ("retry_backoff", 10**7),
    ("retry_backoff", math.nan),
    ("retry_backoff_max", math.inf),
    ("retry_backoff_max", -1),
    ("default_retry_delay", math.nan),
    ("default_retry_delay", 10**9),
    ("rate_limit_global", ("ai", 10**12)),
    ("rate_limit_global", ("ai", math.inf)),
    ("concurrency_limit", 10**6),
    ("concurrency_limit", 2.5),
]


def app() -> Celery:
    return Celery("options", broker="memory://", set_as_current=False)


@pytest.mark.parametrize(("name", "value"), BAD)
def test_tracked_task_refuses_a_bad_option_at_decoration(name: str, value: Any) -> None:
    with pytest.raises(InvalidTaskOption) as info:
        tracked_task(app=app(), **{name: value})(lambda x: x)
    assert info.value.setting == name
    assert repr(value) in str(info.value)
    # without an app (a shared task, made lazily): refused at decoration too
    with pytest.raises(InvalidTaskOption):
        tracked_task(**{name: value})(lambda x: x)


def test_a_bad_queue_is_refused() -> None:
    with pytest.raises(InvalidTaskOption, match="tracked_queue"):
        tracked_task(app=app(), queue="")(lambda x: x)


@pytest.mark.parametrize(("name", "value"), BAD)
def test_a_subclass_with_a_bad_option_is_refused(name: str, value: Any) -> None:
    with pytest.raises(InvalidTaskOption):
        type("Bad", (TrackedTask,), {name: value})


# finalizing an app also registers every shared task other test modules declared (some
# share a name on purpose): Celery's warning about those is not what these tests are about
@pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")
def test_app_task_with_the_base_class_refuses_a_bad_option() -> None:
    a = app()
    a.finalize()  # a finalized app makes the class at decoration (else when first used)
    with pytest.raises(InvalidTaskOption, match="backoff_ms"):
        # not shared: a shared task whose class cannot be made would break every app
        # finalized later in this process (Celery keeps its constructor)
        @a.task(base=TrackedTask, backoff_ms="5s", shared=False)
        def send(x: Any) -> None: ...


# finalizing an app also registers every shared task other test modules declared (some
# share a name on purpose): Celery's warning about those is not what these tests are about
@pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")
def test_app_task_on_a_lazy_app_refuses_it_when_the_class_is_made() -> None:
    a = app()

    @a.task(base=TrackedTask, backoff_ms="5s", shared=False)
    def send(x: Any) -> None: ...

    with pytest.raises(InvalidTaskOption):
        a.finalize()


def test_good_options_are_accepted() -> None:
    class Model:
        @classmethod
        def model_validate(cls, data: Any) -> None: ...

    class Good(TrackedTask):
        backoff_ms = 0
        max_attempts = 2
        job_type = "good"
        idempotency_key = "k:{x}"
        validator = Model

    assert Good.backoff_ms == 0

    def body(x: Any) -> Any:
        return x

    options = {"backoff_ms": 5000, "idempotency_key": lambda x: x, "validator": print}
    task = tracked_task(app=app(), **options)(body)
    assert isinstance(task, TrackedTask) and task.backoff_ms == 5000


def test_invalid_task_option_is_a_configuration_error() -> None:
    assert issubclass(InvalidTaskOption, ConfigurationError)
    assert issubclass(InvalidTaskOption, ValueError)


def _body(document_id: str, pages: int) -> None: ...


def _keywords(**named: Any) -> None: ...


def _two(document_id: str, pages: int) -> None: ...


def _keyword_only(*, arguments: dict[str, Any]) -> None: ...


@pytest.mark.parametrize("check", [_keywords, _two, _keyword_only])
def test_a_validator_that_cannot_take_one_dict_is_refused_at_decoration(check: Any) -> None:
    with pytest.raises(InvalidTaskOption) as info:
        tracked_task(app=app(), validator=check)(_body)
    assert info.value.setting == "validator"
    assert "as one dict" in str(info.value) and "validator(arguments)" in str(info.value)


class _Checker:
    def __call__(self, arguments: dict[str, Any]) -> None: ...


def _one(arguments: dict[str, Any]) -> None: ...


def _with_default(arguments: dict[str, Any], strict: bool = True) -> None: ...


@pytest.mark.parametrize("check", [_one, _with_default, _Checker(), print])
def test_a_validator_taking_one_positional_argument_is_accepted(check: Any) -> None:
    task = tracked_task(app=app(), validator=check)(_body)
    assert isinstance(task, TrackedTask)


@pytest.mark.parametrize(
    ("name", "value"),
    [("max_attempts", 10**400), ("backoff_ms", 10**400), ("retry_backoff_max", 10**400)],
)
def test_a_huge_number_is_refused_with_a_short_message(name: str, value: int) -> None:
    with pytest.raises(InvalidTaskOption) as info:
        tracked_task(app=app(), **{name: value})(lambda x: x)
    assert info.value.setting == name and "to " in str(info.value)
    assert len(str(info.value)) < 200


def test_the_ends_of_the_ranges_are_accepted() -> None:
    for options in (
        {"max_attempts": 2**31 - 1, "backoff_ms": 604_800_000},
        {"max_retries": 2**31 - 2, "retry_backoff": 604_800, "retry_backoff_max": 604_800.0},
        {"default_retry_delay": 604_800, "retry_backoff_max": 0},
        {"retry_backoff": True, "max_attempts": 1, "backoff_ms": None},
        {"concurrency_key": "k:{x}", "concurrency_limit": 10_000},
        {"rate_limit_global": ("ai", 86_400_000)},
    ):
        tracked_task(app=app(), shared=False, **options)(lambda x: x)
