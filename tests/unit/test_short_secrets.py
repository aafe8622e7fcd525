"""Issue 22, item 11: secret values of 1-2 characters (a PIN "42", a one-letter answer)
are masked in log lines, stages and error summaries too: where they stand alone, so the
rest of the text stays readable (not every "a" of a sentence)."""

from __future__ import annotations

from celery_tracked.core.redact import (
    Redaction,
    mask_exception,
    mask_secrets,
    secret_values,
    summarize,
)
from celery_tracked.core.settings import DEFAULT_REDACT_KEYS
from celery_tracked.services.progress import log_text

KEYS = (*DEFAULT_REDACT_KEYS, "pin")
CALL = {"pin": "42", "otp": "7", "password": "x", "card": "4111"}


def test_short_secret_values_are_found() -> None:
    found = secret_values(CALL, KEYS)
    assert {"42", "7", "x"} <= set(found)
    assert "4111" not in found  # not under a secret key


def test_a_short_secret_is_masked_where_it_stands_alone() -> None:
    secrets = secret_values(CALL, KEYS)
    assert mask_secrets("pin 42 refused (otp=7, pw: x)", secrets) == (
        "pin *** refused (otp=***, pw: ***)"
    )
    # inside longer words and numbers it is left: readable, and it tells nothing there
    assert mask_secrets("142 items, box x2, 7th try, exit", secrets) == (
        "142 items, box x2, 7th try, exit"
    )
    assert mask_secrets("code_42_ok", secrets) == "code_***_ok"


def test_log_lines_stages_and_errors_mask_short_secrets() -> None:
    secrets = secret_values(CALL, KEYS)
    assert log_text("checking pin 42", "info", secrets, Redaction(KEYS)) == "checking pin ***"
    assert mask_secrets("stage: otp 7 sent", secrets, KEYS) == "stage: otp *** sent"
    error = ValueError("wrong pin 42")
    assert summarize(error, secrets, KEYS) == "wrong pin ***"
    mask_exception(error, secrets, KEYS)
    assert error.args == ("wrong pin ***",)
