"""Call preparation: arguments bound once, then payload, reprs, secrets and key derived."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery
from pydantic import BaseModel, field_validator

from celery_tracked import (
    ArgumentsMismatch,
    InvalidPayload,
    PayloadNotSerializable,
    PayloadTooLarge,
    TrackedTask,
    tracked_task,
)
from celery_tracked.core.calls import (
    MAX_KEY_CHARS,
    CallRules,
    CallShape,
    PreparedCall,
    idempotency_key,
    key_problem,
    prepare_call,
    template_name,
    validate,
)
from celery_tracked.core.codec import MAX_DEPTH, check_depth
from celery_tracked.core.errors import InvalidTaskOption
from celery_tracked.core.limits import Limits
from celery_tracked.core.options import check_key_template
from celery_tracked.core.redact import Redaction

# the documented default redact keys (docs/configuration.md), pinned literally
KEYS = (
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "authorization",
    "auth",
    "credential",
    "private_key",
    "cookie",
    "session",
    "card_number",
    "cvv",
    "ssn",
)
REDACTED = "[redacted]"


def rules(**options: Any) -> CallRules:
    values: dict[str, Any] = {
        "task_name": "app.tasks.send",
        "redaction": Redaction(KEYS),
        "max_payload_bytes": 65_536,
    }
    values.update(options)
    return CallRules(**values)


def prepare(
    func: Callable[..., Any],
    *args: Any,
    explicit_key: Any = None,
    rules_: CallRules | None = None,
    **kwargs: Any,
) -> PreparedCall:
    return prepare_call(CallShape(func), rules_ or rules(), args, kwargs, explicit_key)


def login(user: str, password: str, retries: int = 2) -> None: ...


def with_extra(user: str, **extra: Any) -> None: ...


# -- positional and keyword arguments, named once ----------------------------------


def test_a_positional_secret_is_redacted_everywhere_and_listed() -> None:
    call = prepare(login, "alice", "hunter22")
    assert json.loads(call.payload_json) == {"args": ["alice", REDACTED], "kwargs": {}}
    assert call.argsrepr == "('alice', '[redacted]')"
    assert call.kwargsrepr == "{}"
    assert call.secrets == ("hunter22",)
    for text in (call.payload_json, call.argsrepr, call.kwargsrepr):
        assert "hunter22" not in text


def test_a_keyword_secret_is_redacted_everywhere_and_listed() -> None:
    call = prepare(login, "alice", password="hunter22")
    assert json.loads(call.payload_json) == {
        "args": ["alice"],
        "kwargs": {"password": REDACTED},
    }
    assert call.argsrepr == "('alice',)"
    assert call.kwargsrepr == "{'password': '[redacted]'}"
    assert call.secrets == ("hunter22",)


def test_the_payload_keeps_the_call_as_given_without_defaults() -> None:
    call = prepare(login, "alice", "hunter22")
    # retry re-runs what was passed: the default ``retries`` is not added
    assert "retries" not in call.payload_json


def test_nested_secrets_in_a_positional_argument() -> None:
    def configure(config: dict[str, Any], name: str) -> None: ...

    call = prepare(configure, {"db": {"api-key": "k-123456"}, "size": 3}, "n")
    assert json.loads(call.payload_json)["args"] == [{"db": {"api-key": REDACTED}, "size": 3}, "n"]
    assert call.secrets == ("k-123456",)
    assert "k-123456" not in call.argsrepr


def test_shape_names_positional_arguments_once() -> None:
    shape = CallShape(login)
    assert shape.positional == ("user", "password", "retries")
    assert shape.names(4) == ["user", "password", "retries", None]
    assert shape.named(["a", "pw", 5, "extra"], {"k": 1}) == {
        "k": 1,
        "user": "a",
        "password": "pw",
        "retries": 5,
    }


def test_keyword_only_parameters_are_not_positional() -> None:
    def f(a: int, /, b: int, *, password: str) -> None: ...

    shape = CallShape(f)
    assert shape.positional == ("a", "b")
    call = prepare(f, 1, 2, password="s3cret")
    assert call.secrets == ("s3cret",)
    assert json.loads(call.payload_json)["kwargs"] == {"password": REDACTED}


def test_defaults_apply_to_key_templates() -> None:
    call = prepare(login, "alice", "pw", rules_=rules(key="{user}-{retries}"))
    assert call.key == "alice-2"


def test_var_keyword_arguments_are_flattened_for_keys_validators_and_secrets() -> None:
    seen: dict[str, Any] = {}

    def validator(named: dict[str, Any]) -> None:
        seen.update(named)

    call = prepare(
        with_extra,
        "bob",
        tenant="t1",
        auth_token="tok-999",
        rules_=rules(key="{user}:{tenant}", validator=validator),
    )
    assert call.key == "bob:t1"
    assert seen == {"user": "bob", "tenant": "t1", "auth_token": "tok-999"}
    assert call.secrets == ("tok-999",)
    assert json.loads(call.payload_json)["kwargs"] == {"tenant": "t1", "auth_token": REDACTED}


# -- refusals ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), (("a",), {}), (("a", "b", 1, 2), {}), (("a", "b"), {"nope": 1})],
)
def test_bad_arity_is_a_type_error_as_in_celery(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(TypeError) as info:  # Celery's own error for it (``typing``)
        prepare_call(CallShape(login), rules(), args, kwargs)
    assert isinstance(info.value, ArgumentsMismatch) and isinstance(info.value, InvalidPayload)
    assert str(info.value).startswith("app.tasks.send: ")


def test_an_argument_given_twice_is_a_type_error() -> None:
    with pytest.raises(ArgumentsMismatch):
        prepare(login, "a", "b", user="c")


def test_without_typing_arguments_are_not_checked_against_the_signature() -> None:
    """``typing=False`` (Celery's): no binding check; the named arguments are the ones
    a parameter names, defaults left out."""
    shape = CallShape(login, strict=False)
    call = prepare_call(shape, rules(), ("a", "b", 1, 2), {"nope": 1})
    assert json.loads(call.payload_json) == {"args": ["a", REDACTED, 1, 2], "kwargs": {"nope": 1}}
    empty = prepare_call(shape, rules(), (), {})
    assert json.loads(empty.payload_json) == {"args": [], "kwargs": {}}


@pytest.mark.parametrize("value", [object(), {1, 2}, float("nan")])
def test_non_json_arguments_are_refused(value: Any) -> None:
    with pytest.raises(PayloadNotSerializable):
        prepare(login, "a", value)


def _deep(depth: int, leaf: Any = "x") -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"password": "pw-9", "k": value}
    return value


def test_arguments_nested_to_the_limit_pass_and_one_more_level_is_refused() -> None:
    """Issue 12 item 9: ``codec.MAX_DEPTH`` levels per argument, checked before any
    recursive pass; the refusal names the argument."""
    call = prepare(login, "a", _deep(MAX_DEPTH), retries=_deep(MAX_DEPTH))
    assert json.loads(call.payload_json)["kwargs"]["retries"]
    for at in ("password", "retries"):
        with pytest.raises(PayloadNotSerializable, match=f"'{at}'.*more than {MAX_DEPTH} levels"):
            prepare(login, "a", **{"password": "p", at: _deep(MAX_DEPTH + 1)})
    with pytest.raises(PayloadNotSerializable, match="positional argument 1"):
        prepare(with_extra, "a", _deep(900))


def test_a_value_shared_twice_is_not_circular_but_one_holding_itself_is() -> None:
    shared = {"n": [1, 2]}
    assert prepare(login, "a", [shared, shared, [shared]]).payload_json
    looped: list[Any] = []
    looped.append({"again": looped})
    with pytest.raises(PayloadNotSerializable, match="circular"):
        prepare(login, "a", looped)


def test_the_depth_check_itself_never_recurses() -> None:
    with pytest.raises(PayloadNotSerializable, match="more than 100 levels"):
        check_depth(_deep(200_000))
    check_depth(_deep(5000), limit=10_000)


def test_a_caller_already_deep_in_the_stack_gets_a_typed_refusal() -> None:
    """The recursive passes (redaction, secrets) ran out of stack: still
    ``PayloadNotSerializable``, never a bare ``RecursionError``."""

    shape, task, value = CallShape(login), rules(), _deep(MAX_DEPTH)  # made once per task

    def from_depth(frames: int) -> PreparedCall:
        return from_depth(frames - 1) if frames else prepare_call(shape, task, ("a", value), {})

    here = len(traceback.extract_stack())
    limit, refused = sys.getrecursionlimit(), set()
    sys.setrecursionlimit(here + 300)
    try:
        for frames in range(0, 290, 2):  # whichever pass runs out of stack
            try:
                from_depth(frames)
            except PayloadNotSerializable as exc:
                refused.add(str(exc))
    finally:
        sys.setrecursionlimit(limit)
    assert refused and all("recursion limit" in text for text in refused), refused


def test_too_large_arguments_are_refused() -> None:
    small = rules(max_payload_bytes=100)
    prepare(login, "a", "x" * 50, rules_=small)
    with pytest.raises(PayloadTooLarge) as info:
        prepare(login, "a", "x" * 100, rules_=small)
    assert "100" in str(info.value)


# -- validators -------------------------------------------------------------------


class LoginModel(BaseModel):
    user: str
    password: str
    retries: int

    @field_validator("password")
    @classmethod
    def long_enough(cls, value: str) -> str:
        if len(value) < 10:
            raise ValueError(f"password {value} is too short")
        return value


def test_pydantic_model_accepts_a_valid_call() -> None:
    call = prepare(login, "alice", "long-enough-pw", rules_=rules(validator=LoginModel))
    assert call.secrets == ("long-enough-pw",)


def test_pydantic_model_refusal_is_invalid_payload_without_the_secret() -> None:
    with pytest.raises(InvalidPayload) as info:
        prepare(login, "alice", "hunter22", rules_=rules(validator=LoginModel))
    assert str(info.value).startswith("app.tasks.send: invalid arguments: ")
    assert "hunter22" not in str(info.value)


def test_pydantic_model_sees_defaults() -> None:
    class Strict(BaseModel):
        user: str
        password: str
        retries: int  # required: only present through the default

    prepare(login, "alice", "pw", rules_=rules(validator=Strict))


def test_callable_validator_receives_the_named_arguments_as_one_dict() -> None:
    """The same convention as a pydantic model: one dict, never keywords."""
    seen: list[dict[str, Any]] = []

    def check(arguments: dict[str, Any]) -> None:
        seen.append(arguments)

    prepare(login, "alice", "pw", rules_=rules(validator=check))
    assert seen == [{"user": "alice", "password": "pw", "retries": 2}]


def test_callable_validator_refusal_masks_the_secret_value() -> None:
    def refuse(arguments: dict[str, Any]) -> None:
        # the value alone, no ``password=`` before it: only value masking can hide it
        raise ValueError(f"{arguments['user']} cannot use {arguments['password']} here")

    with pytest.raises(InvalidPayload) as info:
        prepare(login, "alice", "hunter22", rules_=rules(validator=refuse))
    message = str(info.value)
    assert "hunter22" not in message
    assert message == "app.tasks.send: invalid arguments: alice cannot use *** here"
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_validator_raising_invalid_payload_passes_through() -> None:
    def refuse(_: dict[str, Any]) -> None:
        raise InvalidPayload("my own words")

    with pytest.raises(InvalidPayload) as info:
        prepare(login, "a", "b", rules_=rules(validator=refuse))
    assert str(info.value) == "my own words"


def test_validate_without_validator_does_nothing() -> None:
    validate(rules(), {"anything": object()}, ())


# -- idempotency key ---------------------------------------------------------------


def test_no_key_by_default() -> None:
    assert prepare(login, "a", "b").key is None


def test_key_template_over_named_arguments() -> None:
    assert prepare(login, "alice", "pw", rules_=rules(key="login:{user}")).key == "login:alice"


def test_key_callable_gets_the_call_as_given() -> None:
    seen: list[tuple[Any, ...]] = []

    def key(*args: Any, **kwargs: Any) -> str:
        seen.append((args, kwargs))
        return f"k-{args[0]}"

    call = prepare(login, "alice", password="pw", rules_=rules(key=key))
    assert call.key == "k-alice"
    assert seen == [(("alice",), {"password": "pw"})]


@pytest.mark.parametrize(
    ("explicit", "expected"),
    [
        ("fixed-key", "fixed-key"),
        ("call:{user}", "call:{user}"),
        (42, "42"),
    ],
)
def test_explicit_key_wins_over_the_tasks(explicit: Any, expected: str) -> None:
    call = prepare(login, "alice", "pw", explicit_key=explicit, rules_=rules(key="task:{user}"))
    assert call.key == expected


@pytest.mark.parametrize(
    "key", ["order-{2024}", "client-key-{}", '{"k":1}', "a{user}b", "{", "}{0.x[1]}"]
)
def test_a_per_call_key_is_literal(key: str) -> None:
    """Client-supplied keys (HTTP ``Idempotency-Key``) are never formatted (issue 6/6)."""
    assert prepare(login, "alice", "pw", explicit_key=key).key == key
    assert prepare(login, "alice", "pw", explicit_key=key, rules_=rules(key="t:{user}")).key == key


@pytest.mark.parametrize("key", [lambda user, password: user, b"bytes", 1.5, True, ["k"]])
def test_a_per_call_key_that_is_not_text_is_refused(key: Any) -> None:
    with pytest.raises(InvalidPayload, match="idempotency_key"):
        prepare(login, "alice", "pw", explicit_key=key)


@pytest.mark.parametrize(
    "template", ["k:{user.name}", "k:{user[0]}", "k:{}", "k:{0}", "k:{user", "k:{user}}x{"]
)
def test_a_template_with_attribute_index_or_positional_fields_is_refused(template: str) -> None:
    with pytest.raises(InvalidTaskOption, match="idempotency_key"):
        check_key_template(template)


@pytest.mark.parametrize("template", ["k:{user}", "k:{user!r}:{n:05d}", "{{literal}}", "plain"])
def test_a_template_naming_arguments_is_accepted(template: str) -> None:
    check_key_template(template)
    check_key_template(lambda *a, **k: "k")


def test_the_longest_key_is_accepted() -> None:
    key = "k" * MAX_KEY_CHARS
    assert prepare(login, "a", "b", explicit_key=key).key == key


@pytest.mark.parametrize("key", ["", "k" * (MAX_KEY_CHARS + 1)])
def test_an_empty_or_too_long_key_is_refused(key: str) -> None:
    with pytest.raises(InvalidPayload) as info:
        prepare(login, "a", "b", explicit_key=key)
    assert f"1-{MAX_KEY_CHARS} characters" in str(info.value)


@pytest.mark.parametrize("result", [None, 5, ["k"]])
def test_a_key_callable_returning_no_string_is_refused(result: Any) -> None:
    with pytest.raises(InvalidPayload):
        prepare(login, "a", "b", rules_=rules(key=lambda *a, **k: result))


def test_a_template_naming_a_missing_argument_is_refused() -> None:
    with pytest.raises(InvalidPayload) as info:
        prepare(login, "a", "b", rules_=rules(key="{user}:{region}"))
    assert "cannot build the idempotency key" in str(info.value)
    assert "region" in str(info.value)


def test_a_key_callable_that_raises_is_refused() -> None:
    def key(*args: Any, **kwargs: Any) -> str:
        raise KeyError("tenant")

    with pytest.raises(InvalidPayload, match="cannot build the idempotency key"):
        prepare(login, "a", "b", rules_=rules(key=key))


def test_idempotency_key_directly() -> None:
    r = rules(key="{a}")
    assert idempotency_key(r, None, (), {}, {"a": 1}) == "1"
    assert idempotency_key(r, "x{a}y", (), {}, {"a": 1}) == "x{a}y"
    assert idempotency_key(rules(), None, (), {}, {"a": 1}) is None


# -- bodies without an inspectable signature ---------------------------------------


def test_a_builtin_with_a_text_signature_names_its_positional_argument() -> None:
    call = prepare_call(CallShape(len), rules(key="len:{obj}"), ["abc"], {})
    assert call.key == "len:abc"
    assert json.loads(call.payload_json) == {"args": ["abc"], "kwargs": {}}


def test_a_builtin_without_signature_still_works() -> None:
    shape = CallShape(max)
    assert shape.signature is None and shape.positional == ()
    call = prepare_call(shape, rules(key="m:{password}"), [3, 4], {"password": "hunter22"})
    assert json.loads(call.payload_json) == {"args": [3, 4], "kwargs": {"password": REDACTED}}
    assert call.argsrepr == "(3, 4)"
    assert call.secrets == ("hunter22",)
    assert call.key == "m:hunter22"


class Opaque:
    """A callable instance whose signature cannot be read."""

    __signature__ = "not a signature"

    def __call__(self, *args: Any, **kwargs: Any) -> None: ...


def test_a_callable_instance_without_signature_still_works() -> None:
    shape = CallShape(Opaque())
    assert shape.signature is None
    call = prepare_call(shape, rules(), ["x", {"token": "abc123"}], {"n": 1})
    assert json.loads(call.payload_json) == {
        "args": ["x", {"token": REDACTED}],
        "kwargs": {"n": 1},
    }
    assert "abc123" not in call.argsrepr


def test_a_nested_secret_of_an_unnamed_argument_is_listed_for_masking() -> None:
    call = prepare_call(CallShape(Opaque()), rules(), ["x", {"token": "abc123"}], {})
    assert "abc123" not in call.payload_json
    assert call.secrets == ("abc123",)


def test_a_nested_secret_under_var_positional_is_listed_for_masking() -> None:
    def f(*items: Any) -> None: ...

    call = prepare(f, "x", {"token": "abc123"})
    assert json.loads(call.payload_json)["args"] == ["x", {"token": REDACTED}]
    assert call.secrets == ("abc123",)


# -- key templates are checked when the task is declared -------------------------------


@pytest.mark.parametrize("template", ["doc:{document.id}", "doc:{ids[0]}"])
def test_tracked_task_refuses_attribute_or_index_access_at_decoration(template: str) -> None:
    app = Celery("decl", broker="memory://", set_as_current=False)
    with pytest.raises(InvalidTaskOption, match=r"idempotency_key.*attribute or index"):

        @tracked_task(app=app, idempotency_key=template)
        def ocr(document: Any, ids: Any) -> None: ...

    with pytest.raises(InvalidTaskOption, match="idempotency_key"):

        @tracked_task(idempotency_key=template)  # a shared task: checked now, not at first use
        def ocr_shared(document: Any, ids: Any) -> None: ...

    with pytest.raises(InvalidTaskOption, match="idempotency_key"):

        class Custom(TrackedTask):
            idempotency_key = template

    app.close()


# -- issue 12 item 11: messages about keys never show the key -----------------------


def test_a_key_problem_says_nothing_of_the_keys_content() -> None:
    assert key_problem("k") is None and key_problem("k" * MAX_KEY_CHARS) is None
    assert key_problem("") == "is empty"
    assert key_problem(b"bytes") == "is a bytes, not a string"
    assert key_problem("x" * 300) == f"is 300 characters long, over the limit of {MAX_KEY_CHARS}"
    assert key_problem("ab\x00c") == "holds a NUL byte (at character 3 of 4)"


def test_a_template_is_named_by_its_text_and_a_callable_by_its_name() -> None:
    assert template_name("k:{password}") == "'k:{password}'"
    assert template_name(login) == "<callable tests.unit.test_calls.login>"


def test_the_concurrency_key_is_built_with_the_call_as_the_worker_builds_it() -> None:
    """Defaults apply to both keys, at enqueue and at the worker (``Limits.key_of``)."""

    def body(course_id: str, region: str = "eu", password: str = "") -> None: ...

    shape = CallShape(body)
    task = rules(key="k:{course_id}:{region}", concurrency_key="c:{region}")
    call = prepare_call(shape, task, ("c-1",), {"password": "hunter22"})
    assert (call.key, call.concurrency_key) == ("k:c-1:eu", "c:eu")
    assert Limits(concurrency_key="c:{region}").key_of(shape, ("c-1",), {}) == "c:eu"
    with pytest.raises(InvalidPayload) as info:
        prepare_call(
            shape, rules(concurrency_key="c:{password}" * 30), ("c",), {"password": "p" * 9}
        )
    assert "ppppppppp" not in str(info.value) and "concurrency_key='c:{password}" in str(info.value)


def test_the_reprs_are_the_shape_s_show_function_celery_s_saferepr_in_the_adapter() -> None:
    from celery.utils.saferepr import saferepr

    from celery_tracked.core.calls import REPR_CHARS, plain_repr

    def body(text: str, deep: Any = None) -> None: ...

    deep = {"a": [{"b": [{"c": [1]}]}], "long": "x" * 2000}
    celery_shape = CallShape(body, saferepr)
    assert celery_shape.reprs(("hi", deep), {}, Redaction()) == (
        saferepr(("hi", deep), REPR_CHARS),
        saferepr({}, REPR_CHARS),
    )
    call = prepare_call(celery_shape, rules(), ["hi"], {"deep": deep})
    assert call.kwargsrepr == saferepr({"deep": deep}, REPR_CHARS)
    plain = CallShape(body)  # no adapter: repr, cut
    assert plain.reprs(("hi",), {}, Redaction()) == ("('hi',)", "{}")
    assert len(plain_repr("x" * 5000, REPR_CHARS)) == REPR_CHARS
