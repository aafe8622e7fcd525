"""Issue 24 (trial): a secret value is masked in its escaped forms too: the text a caller
gives (``argsrepr=repr(...)``, JSON) or Celery writes (``MaxRetriesExceededError``'s
``args:(...)``, and a repr of that message) never shows it; a secret nested under a
secret key leaves a well-formed text."""

from __future__ import annotations

import json

import pytest
from celery.exceptions import MaxRetriesExceededError

from celery_tracked.core.redact import mask_secrets, secret_values, summarize
from celery_tracked.core.settings import DEFAULT_REDACT_KEYS

ESCAPING = ["C:\\new\\pw", "x'y\"z", "tab\there", "line\nbreak", 'pw"quote', "pässwört-1"]


@pytest.mark.parametrize("password", ESCAPING)
def test_every_escaped_form_of_a_secret_is_masked(password: str) -> None:
    secrets = secret_values({"password": password}, DEFAULT_REDACT_KEYS)
    texts = [
        repr(("u", password)),
        ascii(("u", password)),
        json.dumps(["u", password]),
        json.dumps(["u", password], ensure_ascii=False),
        repr(repr(("u", password))),  # a repr of a message holding a repr
        repr(str(("u", password))),
    ]
    for text in texts:
        masked = mask_secrets(text, secrets)
        assert "***" in masked, text
        assert password not in masked
        for form in (repr(password)[1:-1], ascii(password)[1:-1], json.dumps(password)[1:-1]):
            assert form not in masked, (text, masked)


def test_celery_max_retries_text_is_masked() -> None:
    password = "C:\\new\\pw-1"
    secrets = secret_values({"password": password}, DEFAULT_REDACT_KEYS)
    exc = MaxRetriesExceededError(
        "Can't retry t.login[abc] args:{} kwargs:{{}}".format(("alice", password))
    )
    assert "pw-1" not in summarize(exc, secrets)
    assert "pw-1" not in mask_secrets(repr(exc), secrets)


def test_a_secret_nested_under_a_secret_key_leaves_a_well_formed_text() -> None:
    kwargs = {"token": {"a": "nested-tok-1"}}
    secrets = secret_values(kwargs, DEFAULT_REDACT_KEYS)
    assert mask_secrets(repr(kwargs), secrets, DEFAULT_REDACT_KEYS) == "{'token': {'a': '***'}}"
