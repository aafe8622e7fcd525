from __future__ import annotations

import sys
import time

import pytest

from celery_tracked import PayloadNotSerializable, PayloadTooLarge, Unrecoverable
from celery_tracked.core.errors import TrackedError
from celery_tracked.core.redact import (
    MAX_SUMMARY_CHARS,
    REDACTED,
    Redaction,
    encode_payload,
    mask_exception,
    mask_secrets,
    mask_url,
    redact,
    secret_values,
    summarize,
)
from celery_tracked.core.retry_policy import backoff_ms
from celery_tracked.core.settings import DEFAULT_REDACT_KEYS, Settings

#: ``tracked_redact_keys`` as documented in docs/configuration.md, pinned literally (not
#: imported from the implementation, so a changed default fails here).
KEYS = (
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "*_key",
    "authorization",
    "auth",
    "credential",
    "private_key",
    "jwt",
    "otp",
    "cookie",
    "session",
    "card_number",
    "cvv",
    "ssn",
)


def test_the_default_redact_keys_are_the_documented_ones() -> None:
    assert Settings().redact_keys == KEYS
    assert Settings.from_conf({"tracked_redis_url": "memory://"}, environ={}).redact_keys == KEYS


def test_redact_nested_secret_keys() -> None:
    value = {"user": "a", "db_password": "p1", "nested": [{"API-Key": "k"}], "n": 1}
    assert redact(value, KEYS) == {
        "user": "a",
        "db_password": REDACTED,
        "nested": [{"API-Key": REDACTED}],
        "n": 1,
    }


def test_secret_values_are_collected_for_masking() -> None:
    assert secret_values({"password": "hunter22", "x": {"token": "abc123"}}, KEYS) == [
        "hunter22",
        "abc123",
    ]


def test_payload_checks() -> None:
    assert encode_payload([1], {"a": "b"}, 100) > 0
    with pytest.raises(PayloadNotSerializable):
        encode_payload([object()], {}, 100)
    with pytest.raises(PayloadNotSerializable):
        encode_payload([float("nan")], {}, 100)
    with pytest.raises(PayloadTooLarge):
        encode_payload(["x" * 200], {}, 100)


def test_summary_is_one_line_masked_and_bounded() -> None:
    exc = ValueError(
        "cannot connect to postgresql://app:pw123@db/x password=hunter22\nTraceback: ..."
    )
    # no known secret values: the URL and ``key=value`` rules alone must mask both
    text = summarize(exc, secrets=[], keys=KEYS)
    assert text == "cannot connect to postgresql://***@db/x password=***"
    assert len(summarize(ValueError("x" * 2000))) <= MAX_SUMMARY_CHARS


@pytest.mark.parametrize(
    ("message", "masked"),
    [
        ("password=hunter22", "password=***"),
        ("db_password: 'hunter22' next", "db_password: '***' next"),
        ('{"api_key": "k-123"}', '{"api_key": "***"}'),
        ("Authorization=Bearer", "Authorization=***"),
        ("user=alice token=abc&x=1", "user=alice token=***&x=1"),
    ],
)
def test_key_value_pairs_are_masked_by_their_key_alone(message: str, masked: str) -> None:
    assert summarize(ValueError(message), secrets=[], keys=KEYS) == masked


def test_known_secret_values_are_masked_without_a_key() -> None:
    assert summarize(ValueError("login hunter22 refused"), ["hunter22"], KEYS) == (
        "login *** refused"
    )
    # without the value being known, nothing names it as a secret
    assert summarize(ValueError("login hunter22 refused"), [], KEYS) == "login hunter22 refused"


def test_mask_url() -> None:
    assert mask_url("redis://:s3cret@h:6379/0 and amqp://u:p@h//") == (
        "redis://***@h:6379/0 and amqp://***@h//"
    )


def test_backoff_is_exponential_jittered_and_capped() -> None:
    assert [backoff_ms(n, 1000, 10**9, lambda: 0.0) for n in (1, 2, 3)] == [1000, 2000, 4000]
    assert backoff_ms(2, 1000, 10**9, lambda: 1.0) == 2500
    assert backoff_ms(30, 1000, 60_000, lambda: 0.5) == 60_000


@pytest.mark.parametrize("rand", [0.0, 0.3, 0.7, 1.0])
def test_backoff_of_the_first_attempt_is_within_the_documented_jitter(rand: float) -> None:
    # documented: base x 2^(n-1) plus up to 25 % jitter
    assert 1000 <= backoff_ms(1, 1000, 10**9, lambda: rand) <= 1000 * 1.25
    assert backoff_ms(1, 1000, 10**9, lambda: 1.0) == 1250


def test_unrecoverable_is_rooted() -> None:
    assert issubclass(Unrecoverable, TrackedError)


def test_mask_url_handles_awkward_passwords() -> None:
    assert mask_url("redis://:pa/ss@h:1/0") == "redis://***@h:1/0"
    assert mask_url("postgresql://u:p@ss@h/db") == "postgresql://***@h/db"
    assert mask_url("redis://h:6379/0") == "redis://h:6379/0"


def test_error_type_never_names_an_internal_class() -> None:
    from celery_tracked.core.errors import StoreError
    from celery_tracked.core.redact import error_type
    from celery_tracked.store import Disconnected

    assert error_type(Disconnected("gone")) == "StoreError"
    assert error_type(StoreError("x")) == "StoreError"
    assert error_type(ValueError("x")) == "ValueError"


def test_exception_chain_is_masked_in_place() -> None:
    try:
        try:
            raise ValueError("inner hunter22")
        except ValueError as inner:
            raise RuntimeError("outer hunter22") from inner
    except RuntimeError as exc:
        mask_exception(exc, ["hunter22"], KEYS)
        assert "hunter22" not in str(exc)
        assert exc.__cause__ is not None and "hunter22" not in str(exc.__cause__)


def test_a_chain_that_revisits_an_exception_is_masked_to_the_end() -> None:
    d = ValueError("D has hunter22")
    b = KeyError("B has hunter22")
    b.__cause__, b.__context__ = d, d
    a = TypeError("A has hunter22")
    e = RuntimeError("E has hunter22")
    e.__cause__, e.__context__ = a, b
    mask_exception(e, ["hunter22"], KEYS)
    assert all("hunter22" not in str(x.args) for x in (a, b, d, e))


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_an_unprintable_exception_is_summarised_by_its_type() -> None:
    from celery_tracked.core.redact import first_line, safe_text

    exc = _Unprintable("hunter22")
    assert summarize(exc, ["hunter22"], KEYS) == "<unprintable _Unprintable>"
    assert first_line(exc) == "<unprintable _Unprintable>"
    assert safe_text(exc) == "<unprintable _Unprintable>"
    mask_exception(exc, ["hunter22"], KEYS)  # never raises either
    assert exc.args == ("***",)


def test_custom_keys_with_hyphens_match_like_names() -> None:
    from celery_tracked.core.calls import CallShape
    from celery_tracked.core.redact import is_secret_key

    keys = Settings.from_conf(
        {"tracked_redis_url": "memory://", "tracked_redact_keys": "X-Client-Sig"}, environ={}
    ).redact_keys
    assert keys == ("x_client_sig",)
    assert is_secret_key("x-client-sig", keys) and is_secret_key("xClientSig", keys)

    def body(**kwargs: object) -> None: ...

    _, kwargsrepr = CallShape(body).reprs((), {"x-client-sig": "s3cret!"}, Redaction(keys))
    assert "s3cret!" not in kwargsrepr and REDACTED in kwargsrepr
    assert summarize(ValueError("x-client-sig=s3cret!"), [], keys) == "x-client-sig=***"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("passphrase", True),
        ("user_pwd", True),
        ("signing_key", True),
        ("jwt", True),
        ("otp_code", True),
        ("credentials", True),
        ("Authorization", True),
        ("session_cookie", True),
        ("idempotency_key", False),
        ("cache_key", False),
        ("key", False),
        ("author", False),
        ("footprint", False),
        ("document_id", False),
    ],
)
def test_the_wider_default_list_spares_harmless_names(name: str, secret: bool) -> None:
    from celery_tracked.core.redact import is_secret_key

    assert is_secret_key(name, Settings().redact_keys) is secret


def test_credentials_in_url_values_are_masked_and_known() -> None:
    keys = Settings().redact_keys
    value = {"dsn": "postgresql://app:hunter22@db/x", "list": ["redis://:pw-1234@h/0"]}
    assert redact(value, keys) == {"dsn": "postgresql://***@db/x", "list": ["redis://***@h/0"]}
    assert "hunter22" in secret_values(value, keys) and "pw-1234" in secret_values(value, keys)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup is Python 3.11+")
def test_group_members_dict_arguments_and_notes_are_masked() -> None:
    keys = Settings().redact_keys
    member = KeyError({"password": "hunter22", "user": "a"})
    member.__notes__ = ["note hunter22"]  # type: ignore[attr-defined]
    group = ExceptionGroup("batch", [member, ValueError("v hunter22")])  # noqa: F821
    group.__notes__ = ["outer hunter22"]  # type: ignore[attr-defined]
    mask_exception(group, ["hunter22"], keys)
    assert member.args == ({"password": REDACTED, "user": "a"},)
    assert member.__notes__ == ["note ***"]  # type: ignore[attr-defined]
    assert group.__notes__ == ["outer ***"]  # type: ignore[attr-defined]
    assert group.exceptions[1].args == ("v ***",)


@pytest.mark.parametrize(
    "text",
    ["y" * 100_000, "a1b2" * 25_000, "x-" * 50_000, "abc://x" * 20_000, "a://" + "b@" * 50_000],
)
def test_masking_is_linear_in_the_texts_length(text: str) -> None:
    """A long run of word characters (a base64 blob in a log line or an error) once took
    minutes (nested quantifiers): the running job lost its lease. Not a benchmark: a guard
    against the catastrophic case, with a bound 100x what it takes."""
    started = time.perf_counter()
    mask_secrets(text, ("s3cret",), DEFAULT_REDACT_KEYS)
    summarize(ValueError(text), ("s3cret",), DEFAULT_REDACT_KEYS)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("Authorization: Bearer eyJ.abc.def", "Authorization: ***"),
        ("authorization=Basic dXNlcjpwYXNz rest", "authorization=*** rest"),
        ('{"password": "hunter2", "user": "bob"}', '{"password": "***", "user": "bob"}'),
        ("x-client-sig: zz9", "x-client-sig: ***"),
        ("idempotency_key=abc token=t0", "idempotency_key=abc token=***"),
        ("https://u:p@ss@host/x", "https://***@host/x"),
    ],
)
def test_header_schemes_and_pairs_are_masked(text: str, masked: str) -> None:
    keys = (*DEFAULT_REDACT_KEYS, "x-client-sig")
    assert mask_secrets(text, (), keys) == masked
