"""Sealed arguments, pure parts (issue 22, item 2): the setting, the seal and its opening,
rotation, a wrong key, the ``secrets`` extra missing, and the reaper's decision."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from cryptography.fernet import Fernet

from celery_tracked import ConfigurationError, Settings
from celery_tracked.core.codec import encode
from celery_tracked.core.jobs import JobStatus
from celery_tracked.core.redact import redact
from celery_tracked.services import sealing
from celery_tracked.services.reaper import Action, Thresholds, decide
from celery_tracked.services.sealing import (
    SealBroken,
    Sealer,
    broken_seal,
    needs_seal,
    seal_call,
    unsealed,
    unsendable,
)
from tests.unit.job_rows import a_job

K1, K2, K3 = (Fernet.generate_key().decode() for _ in range(3))
KEYS = ("password", "token")
BASE = {"tracked_redis_url": "memory://"}


def sealed_job(sealer: Sealer | None, args: list, kwargs: dict):  # type: ignore[no-untyped-def]
    safe = {"args": redact(args, KEYS), "kwargs": redact(kwargs, KEYS)}
    payload = encode(safe)
    token = seal_call(sealer, args, kwargs, payload)
    return a_job(payload_json=payload, secrets_sealed=token)


def test_the_setting_takes_one_key_a_list_or_a_comma_separated_string_and_never_shows_one() -> None:
    assert Settings.from_conf({**BASE, "tracked_secret_key": K1}).secret_key == (K1,)
    assert Settings.from_conf({**BASE, "tracked_secret_key": [K1, K2]}).secret_key == (K1, K2)
    assert Settings.from_conf({**BASE, "tracked_secret_key": K1.encode()}).secret_key == (K1,)
    env = {"CELERY_TRACKED_SECRET_KEY": f" {K2} ,{K1},"}
    assert Settings.from_conf(BASE, env).secret_key == (K2, K1)
    assert Settings.from_conf(BASE).secret_key == ()
    assert K1 not in repr(Settings.from_conf({**BASE, "tracked_secret_key": K1}))
    for bad in ("hunter2-not-a-key", [K1, "short"], [K1, 7]):
        with pytest.raises(ConfigurationError) as caught:
            Settings.from_conf({**BASE, "tracked_secret_key": bad})
        assert caught.value.setting == "tracked_secret_key"
        assert "hunter2" not in str(caught.value) and "short" not in str(caught.value)
        assert K1 not in str(caught.value)
    with pytest.raises(ConfigurationError, match="key 2"):
        Settings.from_conf({**BASE, "tracked_secret_key": [K1, "short"]})
    with pytest.raises(ConfigurationError, match="got int"):
        Settings.from_conf({**BASE, "tracked_secret_key": 5})


def test_a_key_without_the_cryptography_package_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography.fernet", None)  # import fails
    with pytest.raises(ConfigurationError, match=r"celery-tracked\[secrets\]"):
        Sealer((K1,))


def test_the_redacted_top_level_arguments_are_sealed_and_opened_back_with_their_types() -> None:
    sealer = Sealer((K1,))
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    args = [{"token": "t-1", "n": 1}, "plain"]
    kwargs = {"password": "p-1", "when": at, "other": 2}
    job = sealed_job(sealer, args, kwargs)
    assert job.secrets_sealed and "p-1" not in job.secrets_sealed
    assert not unsendable(job) and broken_seal(job, sealer) is None
    assert unsealed(job, sealer) == (args, kwargs)
    assert job.payload["kwargs"]["password"] == "[redacted]"  # the row stays redacted


def test_a_url_whose_credentials_were_masked_is_sealed_too() -> None:
    dsn = "postgresql://app:s3cr3t-pw@db/x"
    job = sealed_job(Sealer((K1,)), [dsn], {"note": "x"})
    assert job.payload["args"] == ["postgresql://***@db/x"] and job.secrets_sealed
    assert unsealed(job, Sealer((K1,))) == ([dsn], {"note": "x"})
    assert needs_seal(sealed_job(None, [dsn], {}).payload_json or "", None)


def test_nothing_is_sealed_without_a_key_or_without_a_redacted_value() -> None:
    assert (
        seal_call(None, [], {"password": "p"}, '{"args":[],"kwargs":{"password":"[redacted]"}}')
        is None
    )
    plain = encode({"args": [], "kwargs": {"x": 1}})
    assert seal_call(Sealer((K1,)), [], {"x": 1}, plain) is None
    unsealed_job = sealed_job(None, [], {"password": "p"})
    assert unsendable(unsealed_job) and needs_seal(unsealed_job.payload_json or "", None)
    assert not needs_seal(plain, None)


def test_a_rotated_key_still_opens_and_a_wrong_or_missing_key_is_a_clear_refusal() -> None:
    job = sealed_job(Sealer((K1,)), [], {"password": "p-2"})
    assert unsealed(job, Sealer((K2, K1)))[1] == {"password": "p-2"}
    with pytest.raises(SealBroken, match="none of the keys") as caught:
        unsealed(job, Sealer((K3,)))
    assert "p-2" not in str(caught.value) and K1 not in str(caught.value)
    with pytest.raises(SealBroken, match="not set in this process"):
        unsealed(job, None)
    with pytest.raises(SealBroken):
        unsealed(replace(job, secrets_sealed="gAAAAAnot-a-token"), Sealer((K1,)))


def test_the_reaper_rescues_a_sealed_job_and_abandons_one_no_key_opens() -> None:
    limits = Thresholds.of(Settings.from_conf(BASE))
    job = replace(sealed_job(Sealer((K1,)), [], {"password": "p"}), status=JobStatus.PENDING)
    assert decide(job, 0, limits, broken_seal(job, Sealer((K1,)))).action is Action.RESCUE
    wrong = decide(job, 0, limits, broken_seal(job, Sealer((K3,))))
    assert wrong.action is Action.ABANDON and "none of the keys" in wrong.why
    unsealed_job = replace(job, secrets_sealed=None)
    assert decide(unsealed_job, 0, limits).action is Action.ABANDON


def test_the_sealer_is_made_once_per_keys() -> None:
    assert sealing.sealer_for(()) is None
    assert sealing.sealer_for((K1,)) is sealing.sealer_for((K1,))
