"""Acceptance: the dashboard in a real browser (issue 28): headless Chromium driven by
Playwright, the dashboard served by uvicorn in this process, real ``celery worker``
processes, PostgreSQL and Redis.

Signed in with the admin token, a user filters the failed jobs of one queue, opens one,
sees its history and its redacted arguments (the canary secret nowhere), retries it and
watches it complete without a reload; bulk-cancels 100 pending jobs through the
confirmation; pauses and resumes a queue; and finds each action in the action log with
its actor. Screenshots are kept in ``test-artifacts/dashboard/`` (``TRACKED_TEST_ARTIFACTS``
to move it), and copied to ``docs/images/dashboard/`` with ``DASHBOARD_SCREENSHOTS=1`` (for
docs/dashboard.md).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from conftest import CELERY, HERE, ROOT, Env, worker_environ
from cryptography.fernet import Fernet
from tracked_app import QUEUE, create_app
from web_tasks import IDLE, REPORTS

from celery_tracked import Tracker
from celery_tracked.web import TokenAuth, dashboard
from tests.conftest import IN_CI, wait_for

pytestmark = pytest.mark.process

CANARY = "CANARY-5e1d-never-on-a-page"
ADMIN_TOKEN = "admin-token-for-the-browser-test"
SECRET = Fernet.generate_key().decode()
SHOTS = ROOT / "docs" / "images" / "dashboard"
ARTIFACTS = Path(os.environ.get("TRACKED_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "dashboard"


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if IN_CI:
            pytest.fail("chromium is not installed (CI=true: .ci/run installs it)")
        pytest.skip("chromium is not installed here (apt-get install chromium; CI has it)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(env: Env) -> Iterator[tuple[str, Any]]:
    """The dashboard of an app like the test's (with a secret key: the redacted argument
    is sealed, so a retry can send it again), on uvicorn in a thread."""
    app = create_app(env.config)
    app.conf.tracked_secret_key = SECRET
    web = dashboard(app, auth=TokenAuth(admin=ADMIN_TOKEN), secret_key="s" * 32)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(web, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=30, what="the dashboard to start")
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        Tracker.for_app(app).close()


def test_a_user_finds_retries_bulk_cancels_and_pauses_in_a_browser(
    env: Env, start_worker: Any, served: tuple[str, Any]
) -> None:
    chromium = _chromium()
    from playwright.sync_api import expect, sync_playwright

    base, app = served
    tracker = Tracker.for_app(app)
    env.redis.set("web:fail", 1)
    worker = start_worker(
        "w1", queues=f"{QUEUE},{REPORTS}", environ={"CELERY_TRACKED_SECRET_KEY": SECRET}
    )
    charge = app.tasks["acc.web_charge"].delay(12, api_password=CANARY).id
    reports = [app.tasks["acc.web_report"].delay(n).id for n in range(3)]
    idle = [app.tasks["acc.web_idle"].delay(n).id for n in range(100)]
    for job_id in (charge, *reports):
        env.wait_status(job_id, "failed", timeout=90)
    env.redis.delete("web:fail")
    shots: list[Path] = []

    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def shot(page: Any, name: str) -> None:
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        shots.append(path)

    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []  # the console's errors: a CSP refusal would show here
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        # sign in
        reply = page.goto(f"{base}/jobs")
        assert reply is not None and reply.status == 401
        page.fill("input[name=token]", ADMIN_TOKEN)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/")
        expect(page.locator("#queues")).to_contain_text(REPORTS)
        shot(page, "overview")
        # filter the failed jobs of one queue: a shareable URL
        page.goto(f"{base}/jobs")
        page.check("input[name=status][value=failed]")
        page.fill("input[name=queue]", QUEUE)
        page.click("#filters button[type=submit]")
        page.wait_for_url("**/jobs?status=failed*")
        assert f"queue={QUEUE}" in page.url
        rows = page.locator("#job-list tbody tr")
        expect(rows).to_have_count(1)
        shot(page, "failed-jobs")
        # open it: history and the redacted arguments
        rows.first.locator("a").click()
        page.wait_for_url(f"**/jobs/{charge}")
        expect(page.locator("#history")).to_contain_text("failed")
        expect(page.locator("#history")).to_contain_text("charging 12")
        expect(page.locator("#arguments")).to_contain_text("[redacted]")
        expect(page.locator("#error")).to_contain_text("card declined")
        assert CANARY not in page.content()
        shot(page, "job-failed")
        # retry it and watch it complete without reloading
        page.evaluate("window.notReloaded = true")
        page.click("#retry")
        expect(page.locator("#action-report")).to_contain_text("1 changed")
        expect(page.locator("#status")).to_have_text("completed", timeout=90_000)
        assert page.evaluate("window.notReloaded === true")  # the same document
        expect(page.locator("#history")).to_contain_text("retry by admin (token)")
        shot(page, "job-retried")
        # bulk-cancel 100 pending jobs, with a confirmation
        page.goto(f"{base}/jobs?queue={IDLE}&status=pending")
        page.click("text=Cancel all matching")
        expect(page.locator("h1")).to_contain_text("Cancel 100 job(s)?")
        assert all(tracker.get_job(j).status.value == "pending" for j in idle[:5])  # type: ignore[union-attr]
        shot(page, "bulk-confirm")
        page.click("#confirm")
        expect(page.locator("#action-report")).to_contain_text("100 changed, 0 refused")
        assert {tracker.get_job(j).status.value for j in idle} == {"cancelled"}  # type: ignore[union-attr]
        # pause and resume a queue
        page.goto(f"{base}/")
        page.locator(f"tr[data-queue='{QUEUE}'] button").click()
        expect(page.locator("#action-report")).to_contain_text("pause on queue:")
        assert [(p.scope, p.name) for p in tracker.paused()] == [("queue", QUEUE)]
        page.goto(f"{base}/")
        expect(page.locator(f"tr[data-queue='{QUEUE}'] .paused")).not_to_be_empty()
        shot(page, "paused")
        page.locator(f"tr[data-queue='{QUEUE}'] button").click()
        expect(page.locator("#action-report")).to_contain_text("resume on queue:")
        assert tracker.paused() == []
        # every action, with its actor
        page.goto(f"{base}/actions")
        log = page.locator("#action-log")
        for action in ("retry", "cancel_many", "pause", "resume"):
            expect(log).to_contain_text(action)
        expect(log.locator("td.actor").first).to_have_text("admin (token)")
        shot(page, "action-log")
        browser.close()
    # the login page's 401 is logged by the browser as a failed resource, nothing else
    assert [e for e in errors if "401" not in e] == [], errors
    assert CANARY not in worker.log()
    assert all(p.stat().st_size > 0 for p in shots)
    if os.environ.get("DASHBOARD_SCREENSHOTS"):
        SHOTS.mkdir(parents=True, exist_ok=True)
        for path in shots:
            shutil.copy(path, SHOTS / path.name)


#: the dashboard's variables removed from the environment the command inherits
UNSET: dict[str, str | None] = {"TRACKED_WEB_ADMIN_TOKEN": None, "TRACKED_WEB_READ_TOKEN": None}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, "needs an authentication choice"),
        ({"TRACKED_WEB_ADMIN_TOKEN": "short"}, "shorter than 16"),
    ],
)
def test_the_command_refuses_to_start_without_authentication(
    env: Env, given: dict[str, str | None], expected: str
) -> None:
    """``celery tracked web`` with no token and no ``--auth`` (or a guessable token):
    exit 2, one line saying what to set, and no server."""
    done = subprocess.run(
        [CELERY, "-A", "tracked_app", "tracked", "web", "--port", str(_free_port())],
        cwd=str(HERE),
        env=worker_environ(env.config, None, {**UNSET, **given}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr


def test_the_command_takes_an_auth_callable_from_the_working_directory(
    env: Env, tmp_path: Path
) -> None:
    """``--auth myauth:who`` with ``myauth.py`` beside the project, as ``-A proj`` finds
    ``proj``: the command imports it from the working directory and serves."""
    (tmp_path / "myauth.py").write_text("def who(request):\n    return None\n")
    port = _free_port()
    command = [CELERY, "-A", "tracked_app", "tracked", "web", "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--auth", "myauth:who"],
        cwd=str(tmp_path),  # tracked_app comes from PYTHONPATH, myauth from here only
        env=worker_environ(env.config, None, UNSET),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: server.poll() is not None or _listening(port), timeout=60,
                 what="the dashboard to start or exit")  # fmt: skip
        assert server.poll() is None, server.communicate()[0]
    finally:
        server.terminate()
        server.communicate(timeout=30)  # closes its pipe


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
