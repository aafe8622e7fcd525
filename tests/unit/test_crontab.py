"""The core's crontab check refuses exactly what Celery's parser refuses."""

from __future__ import annotations

import pytest
from celery.schedules import crontab

from celery_tracked.core.crontab import check_crontab

SAMPLES = [
    "17 3 * * *",
    "*/15 * * * *",
    "0 0 * * mon",
    "0 0 * * mon-fri",
    "0 0 * * Monday",
    "0 0 1 jan *",
    "0 0 1 january *",
    "61 3 * * *",
    "0 0 * * 7",
    "0 0 0 * *",
    "0 0 * 0 *",
    "0 0 * 13 *",
    "*/0 * * * *",
    "1-5/2 * * * *",
    "5-1 * * * *",
    "0 0 * * sun,sat",
    "a b c d e",
    "0 24 * * *",
    "0 0 32 * *",
    "* * * *",
    "* * * * * *",
    "0,30 */2 1-15 1,6 1-5",
    "0 0 * * */2",
    "*/61 * * * *",
    "59-0 * * * *",
    "0 0 * * funday",
    ", * * * *",
]


def celery_accepts(text: str) -> bool:
    try:
        crontab.from_string(text)
    except Exception:
        return False
    return True


def ours_accepts(text: str) -> bool:
    try:
        check_crontab(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("text", SAMPLES)
def test_the_check_agrees_with_celerys_parser(text: str) -> None:
    assert ours_accepts(text) is celery_accepts(text)


def test_a_refusal_says_why() -> None:
    with pytest.raises(ValueError, match="61 > 59"):
        check_crontab("61 3 * * *")
