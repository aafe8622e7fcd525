"""Results are not redacted (docs/security.md, issue 12 item 15): a returned secret is the
caller's data, stored in ``result_json`` and given back as returned, also with
``ignore_result=True`` (which only keeps it out of Celery's result backend)."""

from __future__ import annotations

import pytest

from celery_tracked import tracked_task

from .conftest import AppFactory, tracker_of


@pytest.mark.parametrize("ignore_result", [False, True])
def test_a_returned_secret_is_stored_and_given_back_as_returned(
    make_app: AppFactory, ignore_result: bool
) -> None:
    app = make_app(task_always_eager=True)

    @tracked_task(app=app, shared=False, ignore_result=ignore_result)
    def login(user: str, password: str) -> dict[str, str]:
        return {"user": user, "token": "tok-returned-7", "password": password}

    job_id = login.delay("ann", "pw-given-7").id
    tracker = tracker_of(app)
    job = tracker.get_job(job_id)
    assert job is not None and job.result_json is not None
    assert "tok-returned-7" in job.result_json and "pw-given-7" in job.result_json
    assert tracker.wait(job_id, timeout=5) == {
        "user": "ann",
        "token": "tok-returned-7",
        "password": "pw-given-7",
    }
    assert "pw-given-7" not in str(job.payload_json)  # the arguments are, as documented
    assert "tok-returned-7" not in repr(job)
