"""The dashboard (issue 28) over the memory store, through Starlette's TestClient: auth
(401 anonymous, 403 read-only on every action), CSRF refusal, the canary secret of a
redacted argument in no page, no JSON and no log line, the security headers, the owner
mode, and each action reported and logged with its actor."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from starlette.testclient import TestClient

from celery_tracked import Tracker, tracked_task
from celery_tracked.core.errors import ConfigurationError, StoreError
from celery_tracked.web import Identity, TokenAuth, dashboard, pages

CANARY = "CANARY-7f3a9c-do-not-show"
ADMIN_TOKEN = "admin-token-0123456789abcdef"
READ_TOKEN = "read-token-0123456789abcdef"
ACTIONS = [
    ("/jobs/{job}/retry", {}),
    ("/jobs/{job}/cancel", {}),
    ("/jobs/{job}/cancel", {"running": "yes"}),
    ("/bulk/retry", {"queue": "billing", "confirm": "yes"}),
    ("/bulk/cancel", {"queue": "billing", "confirm": "yes"}),
    ("/pauses/pause", {"scope": "queue", "name": "billing"}),
    ("/pauses/resume", {"scope": "queue", "name": "billing"}),
    ("/cleanup/dry-run", {}),
    ("/circuits/open", {"name": "smtp"}),
    ("/circuits/close", {"name": "smtp"}),
]


@pytest.fixture
def app(tracked_app: Celery) -> Celery:
    tracked_app.conf.task_always_eager = True

    @tracked_task(app=tracked_app, shared=False, name="web.charge", queue="billing", max_attempts=1)
    def charge(amount: int, api_password: str) -> None:
        raise ValueError(f"card declined for {amount}")

    @tracked_task(app=tracked_app, shared=False, name="web.mail", queue="mail")
    def mail(to: str) -> str:
        return f"result-{to}"

    return tracked_app


@pytest.fixture
def jobs(app: Celery) -> dict[str, str]:
    failed = app.tasks["web.charge"].delay(12, api_password=CANARY)
    done = app.tasks["web.mail"].delay("bob@example.com")
    return {"failed": failed.id, "done": done.id}


def _client(app: Celery, **options: Any) -> TestClient:
    options.setdefault("auth", TokenAuth(admin=ADMIN_TOKEN, read_only=READ_TOKEN))
    return TestClient(dashboard(app, **options), base_url="http://testserver")


@pytest.fixture
def client(app: Celery) -> Iterator[TestClient]:
    with _client(app) as c:
        yield c


def _login(client: TestClient, token: str) -> str:
    page = client.get("/login")
    csrf = _csrf(page.text)
    reply = client.post("/login", data={"token": token, "csrf_token": csrf}, follow_redirects=False)
    assert reply.status_code == 303, reply.text
    page = client.get("/")
    token = re.search(r'"X-CSRF-Token": "([^"]+)"', page.text)
    assert token and token.group(1) == client.cookies.get("ct_csrf")  # the double submit
    return token.group(1)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def test_it_refuses_to_start_without_an_authentication_choice(app: Celery) -> None:
    with pytest.raises(ConfigurationError, match="authentication choice"):
        dashboard(app)
    with pytest.raises(ConfigurationError, match="shorter"):
        TokenAuth(admin="short")


def test_an_anonymous_request_is_401_everywhere(client: TestClient, jobs: dict[str, str]) -> None:
    for path in ("/", "/jobs", f"/jobs/{jobs['failed']}", "/actions", "/api/jobs"):
        assert client.get(path).status_code == 401, path
    for path, form in ACTIONS:
        reply = client.post(path.format(job=jobs["failed"]), data=form)
        assert reply.status_code == 401, path


def test_a_read_only_user_reads_and_gets_403_on_every_action(
    client: TestClient, app: Celery, jobs: dict[str, str]
) -> None:
    csrf = _login(client, READ_TOKEN)
    assert client.get("/jobs").status_code == 200
    for path, form in ACTIONS:
        reply = client.post(path.format(job=jobs["failed"]), data={**form, "csrf_token": csrf})
        assert reply.status_code == 403, path
    assert Tracker.for_app(app).get_job(jobs["failed"]).status.value == "failed"  # type: ignore[union-attr]
    bearer = {"Authorization": f"Bearer {READ_TOKEN}"}
    assert client.post(f"/jobs/{jobs['failed']}/retry", headers=bearer).status_code == 403


def test_an_action_without_its_csrf_token_is_refused(
    client: TestClient, app: Celery, jobs: dict[str, str]
) -> None:
    csrf = _login(client, ADMIN_TOKEN)
    url = f"/jobs/{jobs['failed']}/cancel"
    assert client.post(url, data={}).status_code == 403
    assert client.post(url, data={"csrf_token": "forged.token"}).status_code == 403
    other = _client(app)  # a token of another session (another secret) is refused too
    forged = _csrf(other.get("/login").text)
    assert client.post(url, data={"csrf_token": forged}).status_code == 403
    assert Tracker.for_app(app).actions() == []  # nothing was done, nothing logged
    assert client.post(url, data={"csrf_token": csrf}).status_code == 200


def test_the_canary_of_a_redacted_argument_is_in_no_page_json_or_log_line(
    client: TestClient, jobs: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    csrf = _login(client, ADMIN_TOKEN)
    job = jobs["failed"]
    bodies = [
        client.get(path).text
        for path in (
            "/", "/overview/live", "/jobs", "/jobs?status=failed&queue=billing", f"/jobs/{job}",
            f"/jobs/{job}/live", f"/pipelines/{job}", "/actions", "/api/overview", "/api/jobs",
            f"/api/jobs/{job}", f"/api/jobs/{jobs['done']}", "/api/actions",
        )
    ]  # fmt: skip
    page = client.get(f"/jobs/{job}").text
    assert "[redacted]" in page and "api_password" in page and "card declined" in page
    bodies.append(client.post(f"/jobs/{job}/retry", data={"csrf_token": csrf}).text)
    bodies.append(client.get("/actions").text)
    for body in bodies:
        assert CANARY not in body
        assert "result-bob" not in body  # no result either
    assert all(
        CANARY not in r.getMessage() and CANARY not in str(r.__dict__) for r in caplog.records
    )


def test_every_response_carries_the_security_headers(client: TestClient) -> None:
    for path in ("/login", "/", "/static/htmx.min.js"):
        headers = client.get(path).headers
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"


def test_each_action_is_reported_and_logged_with_its_actor(
    client: TestClient, app: Celery, jobs: dict[str, str]
) -> None:
    csrf = _login(client, ADMIN_TOKEN)
    tracker = Tracker.for_app(app)
    reply = client.post(f"/jobs/{jobs['done']}/retry", data={"csrf_token": csrf})
    assert "0 changed, 1 refused" in reply.text and "it is completed" in reply.text
    reply = client.post(
        "/pauses/pause", data={"csrf_token": csrf, "scope": "queue", "name": "mail"}
    )
    assert reply.status_code == 200 and [p.name for p in tracker.paused()] == ["mail"]
    assert (
        client.post(
            "/pauses/resume", data={"csrf_token": csrf, "scope": "queue", "name": "mail"}
        ).status_code
        == 200
    )
    assert tracker.paused() == []
    ask = client.post("/bulk/cancel", data={"csrf_token": csrf, "queue": "billing"})
    assert "Yes, cancel them" in ask.text  # a confirmation first: nothing done yet
    assert client.post("/cleanup/dry-run", data={"csrf_token": csrf}).status_code == 200
    logged = [(a.actor, a.role, a.action, a.target) for a in reversed(tracker.actions())]
    assert logged == [
        ("admin (token)", "admin", "retry", jobs["done"]),
        ("admin (token)", "admin", "pause", "queue:mail"),
        ("admin (token)", "admin", "resume", "queue:mail"),
        ("admin (token)", "admin", "cleanup_dry_run", "retention"),
    ]
    assert "admin (token)" in client.get("/actions").text


def test_the_owner_mode_shows_a_non_admin_only_their_jobs(app: Celery) -> None:
    def auth(request: Any) -> Identity | None:
        name = request.headers.get("x-user")
        return None if name is None else Identity(name, "read_only", owner_id=name)

    mine = app.tasks["web.mail"].apply_async(("a@x",), owner_id="alice")
    theirs = app.tasks["web.mail"].apply_async(("b@x",), owner_id="bob")
    with _client(app, auth=auth, owner_scoped=True) as client:
        alice = {"x-user": "alice"}
        listed = client.get("/api/jobs", headers=alice).json()["jobs"]
        assert [j["id"] for j in listed] == [mine.id]
        assert client.get(f"/jobs/{theirs.id}", headers=alice).status_code == 404
        assert client.get(f"/jobs/{mine.id}", headers=alice).status_code == 200
        assert client.get("/api/overview", headers=alice).json()["queues"] == []


def test_the_list_pages_by_cursor_with_its_filters_in_shareable_urls(
    client: TestClient, app: Celery
) -> None:
    for n in range(7):
        app.tasks["web.mail"].delay(f"user{n}@x")
    _login(client, READ_TOKEN)
    page = client.get("/jobs?queue=mail&status=completed&created_after=1h")
    assert page.status_code == 200 and page.text.count('class="status-completed"') == 7
    original, pages.PAGE = pages.PAGE, 3
    try:
        seen: list[str] = []
        path = "/jobs?queue=mail&status=completed"
        while path:
            html = client.get(path).text
            seen += re.findall(r'href="/jobs/([0-9a-f-]{36})"', html)
            found = re.search(r'href="(/jobs\?[^"]+)" id="next-page"', html)
            path = found.group(1).replace("&amp;", "&") if found else ""
            if path:
                assert "queue=mail" in path and "status=completed" in path and "cursor=" in path
        assert len(seen) == len(set(seen)) == 7  # no repeat, no gap
    finally:
        pages.PAGE = original
    bad = client.get("/jobs?created_after=yesterday-ish")
    assert bad.status_code == 400 and "created_after" in bad.text
    assert client.get("/api/jobs?status=nope").status_code == 400


def test_a_job_page_shows_its_pipeline_parent_and_children(client: TestClient, app: Celery) -> None:
    @tracked_task(app=app, bind=True, shared=False, name="web.step", queue="mail")
    def step(self: Any, n: int) -> int:
        if n < 3:
            self.then(step, n + 1)
        return n

    first = step.delay(1).id
    tracker = Tracker.for_app(app)
    jobs = {j.id: j for j in tracker.pipeline(first).jobs}
    second = next(j.id for j in jobs.values() if j.parent_job_id == first)
    _login(client, READ_TOKEN)
    html = client.get(f"/jobs/{second}").text
    assert f'href="/jobs/{first}"' in html  # its parent
    assert 'id="children"' in html and 'id="tree"' in html
    assert html.count("web.step") >= 3
    tree = client.get(f"/pipelines/{first}")
    assert tree.status_code == 200 and tree.text.count('<li class="depth-') == 3
    assert client.get("/pipelines/00000000-0000-0000-0000-000000000000").status_code == 404


def test_failures_are_one_safe_line_with_the_headers(
    client: TestClient, app: Celery, jobs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from celery_tracked.core.errors import StoreError

    _login(client, READ_TOKEN)
    tracker = Tracker.for_app(app)

    def down(job_id: Any) -> None:
        raise StoreError("connection to postgresql://app:hunter2-secret@db:5432/x refused")

    monkeypatch.setattr(tracker, "get_job", down)
    reply = client.get(f"/jobs/{jobs['failed']}")
    assert reply.status_code == 503 and "refused" in reply.text
    assert "hunter2-secret" not in reply.text
    assert reply.headers["x-frame-options"] == "DENY"

    def broken(job_id: Any) -> None:
        raise RuntimeError(f"a bug holding {CANARY}")

    monkeypatch.setattr(tracker, "get_job", broken)
    reply = client.get(f"/jobs/{jobs['failed']}")
    assert reply.status_code == 500 and CANARY not in reply.text
    assert "script-src 'self'" in reply.headers["content-security-policy"]


def test_the_overview_shows_counts_throughput_and_run_times(
    client: TestClient, jobs: dict[str, str]
) -> None:
    _login(client, READ_TOKEN)
    found = {q["queue"]: q for q in client.get("/api/overview").json()["queues"]}
    billing, mail = found["billing"], found["mail"]
    assert billing["counts"]["failed"] == 1 and billing["failed_last_hour"] == 1
    assert mail["counts"]["completed"] == 1 and mail["per_minute"] > 0
    assert mail["spark"].strip() and set(mail["run_ms"]) == {"p50", "p95", "p99"}
    page = client.get("/").text
    assert "ended/min" in page and 'data-queue="billing"' in page


def test_an_async_callable_names_the_actor_and_csrf_still_applies(
    app: Celery, jobs: dict[str, str]
) -> None:
    async def auth(request: Any) -> Identity | None:
        return Identity("alice@example.com", "admin") if request.headers.get("x-sso") else None

    with _client(app, auth=auth) as client:
        assert client.get("/").status_code == 401
        sso = {"x-sso": "1"}
        page = client.get(f"/jobs/{jobs['failed']}", headers=sso)
        csrf = _csrf(page.text)
        url = f"/jobs/{jobs['failed']}/cancel"
        assert client.post(url, headers=sso, data={}).status_code == 403  # no token
        reply = client.post(url, headers=sso, data={"csrf_token": csrf})
        assert reply.status_code == 200 and "1 refused" in reply.text  # failed: not waiting
        [entry] = Tracker.for_app(app).actions()
        assert (entry.actor, entry.action, entry.refused) == ("alice@example.com", "cancel", 1)
        assert "it is failed" in (entry.detail or "")


def test_a_job_type_or_everything_is_paused_from_the_form(
    client: TestClient, app: Celery, jobs: dict[str, str]
) -> None:
    csrf = _login(client, ADMIN_TOKEN)
    assert 'id="pause-form"' in client.get("/").text
    tracker = Tracker.for_app(app)
    form = {"csrf_token": csrf, "scope": "job_type", "name": "web.mail", "reason": "smtp down"}
    assert client.post("/pauses/pause", data=form).status_code == 200
    assert (
        client.post("/pauses/pause", data={"csrf_token": csrf, "scope": "all"}).status_code == 200
    )
    assert {(p.scope, p.name, p.reason) for p in tracker.paused()} == {
        ("job_type", "web.mail", "smtp down"),
        ("all", "*", None),
    }
    unknown = client.post("/pauses/pause", data={**form, "name": "no.such.type"})
    assert unknown.status_code == 400
    for scope, name in (("job_type", "web.mail"), ("all", "*")):
        data = {"csrf_token": csrf, "scope": scope, "name": name}
        assert client.post("/pauses/resume", data=data).status_code == 200
    assert tracker.paused() == []
    again = client.post("/pauses/resume", data={"csrf_token": csrf, "scope": "all"})
    assert "it was not paused" in again.text


def test_many_tabs_cost_one_overview_read(app: Celery, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    tracker = Tracker.for_app(app)
    reads: list[int] = []
    real = tracker.stats

    def slow_stats() -> Any:
        reads.append(1)
        time.sleep(0.3)  # a slow read, so the other requests arrive while it runs
        return real()

    monkeypatch.setattr(tracker, "stats", slow_stats)
    with _client(app) as client:
        _login(client, READ_TOKEN)
        replies: list[int] = []
        threads = [
            threading.Thread(target=lambda: replies.append(client.get("/api/overview").status_code))
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert replies == [200] * 8 and len(reads) == 1


def test_mounted_in_fastapi_its_links_and_cookies_live_under_the_mount(
    app: Celery, jobs: dict[str, str]
) -> None:
    from fastapi import FastAPI

    api = FastAPI()
    api.mount("/ops/jobs", dashboard(app, auth=TokenAuth(admin=ADMIN_TOKEN)))

    @api.get("/health")
    def health() -> dict[str, str]:
        return {"ok": "yes"}

    with TestClient(api) as client:
        assert client.get("/health").json() == {"ok": "yes"}
        login = client.get("/ops/jobs/login")
        assert 'action="/ops/jobs/login"' in login.text
        assert 'src="/ops/jobs/static/htmx.min.js"' in login.text
        reply = client.post(
            "/ops/jobs/login",
            data={"token": ADMIN_TOKEN, "csrf_token": _csrf(login.text)},
            follow_redirects=False,
        )
        assert reply.status_code == 303 and reply.headers["location"] == "/ops/jobs/"
        assert "Path=/ops/jobs" in reply.headers["set-cookie"]
        assert (
            "HttpOnly" in reply.headers["set-cookie"]
            and "SameSite=strict" in reply.headers["set-cookie"]
        )
        page = client.get("/ops/jobs/jobs?status=failed")
        assert page.status_code == 200 and f'href="/ops/jobs/jobs/{jobs["failed"]}"' in page.text
        assert client.get("/ops/jobs/static/htmx.min.js").text.startswith("/*! htmx 2.0.11")
    api = FastAPI()  # mounted under a path holding "/api/": pages stay pages
    api.mount("/api/jobs", dashboard(app, auth=TokenAuth(admin=ADMIN_TOKEN)))
    with TestClient(api, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
        assert client.get("/api/jobs/jobs").headers["content-type"].startswith("text/html")
        assert client.get("/api/jobs/api/jobs").json()["jobs"]


def test_a_session_survives_a_restart_but_not_a_new_token(app: Celery) -> None:
    secret = "a-shared-secret-key-0123456789"
    with _client(app, secret_key=secret) as first:
        _login(first, ADMIN_TOKEN)
        cookie = first.cookies.get("ct_session")
    assert cookie
    same = TokenAuth(admin=ADMIN_TOKEN, read_only=READ_TOKEN)
    with _client(app, auth=same, secret_key=secret) as restarted:
        restarted.cookies.set("ct_session", cookie)
        assert restarted.get("/").status_code == 200  # another process, the same secret
    rotated = TokenAuth(admin="a-brand-new-admin-token-42", read_only=READ_TOKEN)
    with _client(app, auth=rotated, secret_key=secret) as after:
        after.cookies.set("ct_session", cookie)
        assert after.get("/").status_code == 401  # the old token's sessions ended
    tampered = cookie[:-3] + ("AAA" if not cookie.endswith("AAA") else "BBB")
    with _client(app, auth=same, secret_key=secret) as forged:
        forged.cookies.set("ct_session", tampered)
        assert forged.get("/").status_code == 401


def test_wrong_tokens_are_throttled_per_client(client: TestClient) -> None:
    page = client.get("/login")
    csrf = _csrf(page.text)
    for _ in range(5):
        wrong = client.post("/login", data={"token": "x" * 20, "csrf_token": csrf})
        assert wrong.status_code == 401 and "wrong token" in wrong.text
    right = client.post("/login", data={"token": ADMIN_TOKEN, "csrf_token": csrf})
    assert right.status_code == 429  # even the right token, for a while
    assert client.cookies.get("ct_session") is None


def test_a_bulk_retry_confirms_then_reports_what_it_refused_and_why(
    client: TestClient, app: Celery, jobs: dict[str, str]
) -> None:
    csrf = _login(client, ADMIN_TOKEN)
    filters = {"csrf_token": csrf, "queue": "billing", "status": "failed"}
    ask = client.post("/bulk/retry", data=filters)
    assert "Retry 1 job(s)?" in ask.text and 'name="include_unrecoverable"' in ask.text
    assert Tracker.for_app(app).actions() == []  # asked, nothing done
    done = client.post("/bulk/retry", data={**filters, "confirm": "yes"})
    assert "0 changed, 1 refused" in done.text and "redacted values" in done.text
    assert CANARY not in done.text
    wrong = client.post("/bulk/cancel", data={**filters, "confirm": "yes"})
    assert wrong.status_code == 400 and "not failed" in wrong.text  # cancel: waiting jobs only
    [entry] = Tracker.for_app(app).actions()
    assert (entry.action, entry.changed, entry.refused) == ("retry_many", 0, 1)
    assert entry.target == '{"queue": "billing", "status": ["failed"]}'


def test_circuits_are_shown_opened_and_closed_by_hand(client: TestClient, app: Celery) -> None:
    """Issue 27's circuit breakers (``Tracker.circuits``/``open_circuit``/``close_circuit``)
    on the overview: opened and closed by an admin, each recorded with its actor."""

    @tracked_task(app=app, shared=False, name="web.smtp", queue="mail", circuit="smtp")
    def smtp(to: str) -> str:
        return to

    csrf = _login(client, ADMIN_TOKEN)
    page = client.get("/").text
    assert "Circuits" in page and 'id="circuit-form"' in page
    opened = client.post(
        "/circuits/open", data={"csrf_token": csrf, "name": "smtp", "reason": "provider down"}
    )
    assert opened.status_code == 200 and "open_circuit" in opened.text
    tracker = Tracker.for_app(app)
    [circuit] = tracker.circuits()
    assert (circuit.name, circuit.state, circuit.opened_by) == ("smtp", "open", "admin (token)")
    assert 'data-circuit="smtp"' in client.get("/").text
    unknown = client.post("/circuits/open", data={"csrf_token": csrf, "name": "nope"})
    assert unknown.status_code == 400
    assert (
        client.post("/circuits/close", data={"csrf_token": csrf, "name": "smtp"}).status_code == 200
    )
    assert tracker.circuits()[0].state == "closed"
    again = client.post("/circuits/close", data={"csrf_token": csrf, "name": "smtp"})
    assert "it was closed" in again.text
    logged = [(a.action, a.target, a.actor) for a in reversed(tracker.actions())]
    assert logged == [
        ("open_circuit", "circuit:smtp", "admin (token)"),
        ("close_circuit", "circuit:smtp", "admin (token)"),
        ("close_circuit", "circuit:smtp", "admin (token)"),
    ]


def test_the_maintenance_panel_shows_each_plugins_last_pass_and_no_secret(
    client: TestClient, app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28's reaper/relay/cleanup activity: every plugin's last pass on the overview,
    for a read-only user too; a failed pass's error masked."""
    tracker = Tracker.for_app(app)
    tracker.reap()
    tracker.cleanup()

    def broken(**_: object) -> list[str]:
        raise StoreError(f"lost postgresql://ops:{CANARY}@db/jobs password={CANARY}")

    monkeypatch.setattr(tracker._services.store, "unpublished", broken)
    with pytest.raises(StoreError):
        tracker.relay()
    _login(client, READ_TOKEN)
    shown = {m["name"]: m for m in client.get("/api/overview").json()["maintenance"]}
    assert list(shown) == ["relay", "schedule", "reap", "cleanup", "probe"]
    assert shown["reap"]["ran"] and shown["reap"]["passes"] == 1 and not shown["reap"]["stale"]
    assert shown["relay"]["failed"] and shown["relay"]["error"].startswith("StoreError: lost")
    assert not shown["schedule"]["ran"] and shown["schedule"]["stale"]  # Beat never ran it
    page = client.get("/").text
    assert "<h2>Maintenance</h2>" in page and 'data-plugin="cleanup"' in page
    relay_row = page[page.index('data-plugin="relay"') :].split("</tr>")[0]
    assert "failed" in relay_row and "never" not in relay_row
    for body in (page, client.get("/api/overview").text, client.get("/overview/live").text):
        assert CANARY not in body


def test_the_tenant_filter_narrows_the_list_and_the_bulk_actions(
    client: TestClient, app: Celery
) -> None:
    """``tenant`` is a ``Tracker.jobs`` filter (issue 27): the list and a bulk action over
    ``?tenant=`` act on that tenant's jobs only, never silently on every tenant's."""

    @tracked_task(app=app, shared=False, name="web.bill", queue="billing", tenant="{t}",
                  max_attempts=1)  # fmt: skip
    def bill(t: str) -> None:
        raise RuntimeError("provider down")

    acme, other = bill.delay("acme").id, bill.delay("globex").id
    csrf = _login(client, ADMIN_TOKEN)
    listed = client.get("/api/jobs?tenant=acme").json()
    assert [j["id"] for j in listed["jobs"]] == [acme] and listed["filters"] == {"tenant": "acme"}
    assert 'name="tenant"' in client.get("/jobs?tenant=acme").text  # the form keeps it
    ask = client.post("/bulk/retry", data={"csrf_token": csrf, "tenant": "acme"})
    assert "Retry 1 job(s)?" in ask.text, ask.text
    done = client.post("/bulk/retry", data={"csrf_token": csrf, "tenant": "acme", "confirm": "yes"})
    assert done.status_code == 200
    tracker = Tracker.for_app(app)
    assert tracker.get_job(other).status.value == "failed"  # type: ignore[union-attr]
    [entry] = tracker.actions()
    assert entry.target == '{"tenant": "acme"}'
    assert client.get("/api/jobs?tenant=" + "x" * 300).status_code == 400


def test_the_owner_mode_hides_another_owners_child_on_a_job_page(app: Celery) -> None:
    def auth(request: Any) -> Identity | None:
        name = request.headers.get("x-user")
        return None if name is None else Identity(name, "read_only", owner_id=name)

    mail = app.tasks["web.mail"]
    mine = mail.apply_async(("a@x",), owner_id="alice").id
    child = mail.with_options(owner_id="bob", parent_job_id=mine, correlation_id=mine)("b@x")
    with _client(app, auth=auth, owner_scoped=True) as client:
        page = client.get(f"/api/jobs/{mine}", headers={"x-user": "alice"}).json()
        assert page["children"] == []
        assert child.job_id not in client.get(f"/jobs/{mine}", headers={"x-user": "alice"}).text
        tree = client.get(f"/api/pipelines/{mine}", headers={"x-user": "alice"})
        assert tree.status_code == 404  # no JSON route: the page
        tree = client.get(f"/pipelines/{mine}", headers={"x-user": "alice"})
        assert child.job_id not in tree.text and "completed 1," in tree.text, tree.text
    with _client(app) as client:  # an admin still sees it
        _login(client, ADMIN_TOKEN)
        children = client.get(f"/api/jobs/{mine}").json()["children"]
        assert [c["id"] for c in children] == [child.job_id]


def test_bad_ids_in_actions_and_the_action_log_are_client_errors(
    client: TestClient, jobs: dict[str, str]
) -> None:
    csrf = _login(client, ADMIN_TOKEN)
    for path in ("/jobs/a%00b/retry", "/jobs/a%00b/cancel"):
        reply = client.post(path, data={"csrf_token": csrf})
        assert reply.status_code == 404 and "no such job" in reply.text, (path, reply.text)
    for before in ("99999999999999999999999", "-1", "0"):
        assert client.get(f"/api/actions?before={before}").status_code == 400, before
    assert client.get("/api/actions?before=5").status_code == 200


def test_an_outage_page_keeps_the_signed_in_csrf_token(
    client: TestClient, app: Celery, jobs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 503 (the database failed once) is rendered for the signed-in admin: it must not
    replace their CSRF cookie with an anonymous one, or every action of their open pages
    is refused (403) afterwards."""
    from celery_tracked.core.errors import StoreError

    csrf = _login(client, ADMIN_TOKEN)
    tracker = Tracker.for_app(app)

    def down(*args: Any, **kwargs: Any) -> None:
        raise StoreError("connection refused")

    with monkeypatch.context() as patch:
        patch.setattr(tracker, "get_job", down)
        assert client.get(f"/jobs/{jobs['failed']}").status_code == 503
    assert client.cookies.get("ct_csrf") == csrf
    reply = client.post(f"/jobs/{jobs['failed']}/retry", data={"csrf_token": csrf})
    assert reply.status_code == 200, reply.text


def test_wrong_bearer_tokens_are_throttled_as_sign_ins_are(client: TestClient) -> None:
    """A script's ``Authorization: Bearer`` is a token guess as a sign-in is: five wrong
    ones from one address and that address is refused (429), the right token too."""
    for _ in range(5):
        wrong = client.get("/api/jobs", headers={"Authorization": "Bearer " + "x" * 20})
        assert wrong.status_code == 401
    right = client.get("/api/jobs", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert right.status_code == 429, right.text
    page = client.get("/login")
    late = client.post("/login", data={"token": ADMIN_TOKEN, "csrf_token": _csrf(page.text)})
    assert late.status_code == 429  # one count per address, whichever way it guessed


def test_a_job_page_shows_its_tenant_and_fairness_key(client: TestClient, app: Celery) -> None:
    @tracked_task(app=app, shared=False, name="web.export", queue="mail", tenant="{t}",
                  concurrency_key="exports", fairness_key="tenant:{t}")  # fmt: skip
    def export(t: str) -> None:
        return None

    job = export.delay("acme").id
    _login(client, READ_TOKEN)
    shown = client.get(f"/api/jobs/{job}").json()["job"]
    assert (shown["tenant"], shown["fairness_key"]) == ("acme", "tenant:acme")
    assert "<th>tenant</th><td>acme</td>" in client.get(f"/jobs/{job}").text


def test_an_unknown_filter_is_refused_not_ignored(
    client: TestClient, app: Celery, jobs: dict[str, str]
) -> None:
    """A misspelt filter (``tenant_id=`` for ``tenant=``) is a 400 naming it: ignored, the
    list would show, and a bulk action act on, every job."""
    csrf = _login(client, ADMIN_TOKEN)
    reply = client.get("/api/jobs?tenant_id=acme")
    assert reply.status_code == 400 and "tenant_id" in reply.json()["error"]
    assert client.get("/jobs?queue=billing&cursor=").status_code == 200  # its own fields
    form = {"csrf_token": csrf, "state": "failed", "confirm": "yes"}
    done = client.post("/bulk/retry", data=form)
    assert done.status_code == 400 and "state" in done.text
    assert Tracker.for_app(app).actions() == []
    ask = client.post("/bulk/retry", data={"csrf_token": csrf, "queue": "billing"})
    assert ask.status_code == 200 and "Retry 1 job(s)?" in ask.text
