"""The dashboard's pages and their JSON (``/api/...``): overview, job list, a job, a
pipeline, the action log, and the login page (``TokenAuth``). Reads only, each through
the tracker; the live parts are fragments that htmx polls (``.../live``)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..core.errors import InvalidFilter, InvalidPayload, JobNotFound
from ..core.jobs import Job
from ..core.pipelines import Pipeline
from .auth import CSRF_FIELD, SESSION_COOKIE, Identity, TokenAuth, csrf_ok
from .dash import Dash, failure
from .filters import NAMES, STATUSES, filters_of, given, query_of
from .views import arguments, circuit_view, event_view, job_view, pause_view, queue_rows

logger = logging.getLogger("celery_tracked.web")
PAGE = 50
Endpoint = Callable[[Request], Awaitable[Response]]
#: a job's page shows its pipeline's tree up to this many jobs (the pipeline page: all)
TREE = 100


class Pages:
    """The read routes (see the module's docstring)."""

    def __init__(self, dash: Dash) -> None:
        self.dash = dash
        self.masking = dash.tracker.settings.masking

    def routes(self) -> list[Route]:
        overview, jobs, job = self._read(self.overview), self._read(self.jobs), self._read(self.job)
        pipeline, actions = self._read(self.pipeline), self._read(self.actions)
        return [
            Route("/", overview, name="overview"),
            Route("/overview/live", overview, name="overview_live"),
            Route("/login", self.login, methods=["GET", "POST"], name="login"),
            Route("/logout", self.logout, methods=["POST"], name="logout"),
            Route("/jobs", jobs, name="jobs"),
            Route("/jobs/{job_id}", job, name="job"),
            Route("/jobs/{job_id}/live", job, name="job_live"),
            Route("/pipelines/{cid}", pipeline, name="pipeline"),
            Route("/actions", actions, name="actions"),
            Route("/api/overview", overview, name="api_overview"),
            Route("/api/jobs", jobs, name="api_jobs"),
            Route("/api/jobs/{job_id}", job, name="api_job"),
            Route("/api/actions", actions, name="api_actions"),
        ]

    # -- the gate ---------------------------------------------------------------------

    def _read(self, page: Callable[[Request, Identity], Response]) -> Endpoint:
        """The endpoint of ``page``: 401 without an identity, else ``page`` run in the
        thread pool (its reads block on the database, never the event loop)."""

        async def endpoint(request: Request) -> Response:
            who = await self.dash.gate(request, "sign in to see the dashboard")
            if isinstance(who, Response):
                return who
            return await run_in_threadpool(page, request, who)

        return endpoint

    def _show(self, request: Request, who: Identity, name: str, data: dict[str, Any]) -> Response:
        if request.url.path.startswith(self.dash.base(request) + "/api/"):
            return JSONResponse(data)
        live = request.url.path.endswith("/live")
        page = name.replace(".html", "_live.html") if live else name
        return self.dash.render(request, who, page, **data)

    async def failed(self, request: Request, exc: Exception) -> Response:
        """A failure of the library (the database, Redis, the broker, a setting) as a 503
        page of one masked line, logged as one line too."""
        logger.warning(
            "dashboard: %s failed: %s", request.url.path, self.masking.mask(failure(exc))
        )
        try:  # rendered for the signed-in user: their CSRF cookie stays theirs
            who = await self.dash.who(request)
        except Exception:  # the failure may be the auth callable's own
            who = None
        return self.dash.refuse(request, who, 503, failure(exc))

    # -- pages ------------------------------------------------------------------------

    def overview(self, request: Request, who: Identity) -> Response:
        if self.dash.scoped(who) is not False:  # a tenant sees no other tenant's counts
            data: dict[str, Any] = {"queues": [], "pauses": [], "scoped": True}
        else:
            data = self.dash.cached(self._overview)
        return self._show(request, who, "overview.html", data)

    def _overview(self) -> dict[str, Any]:
        tracker = self.dash.tracker
        throughput = tracker.throughput()
        return {
            "queues": queue_rows(tracker.stats(), throughput),
            "pauses": [pause_view(p) for p in tracker.paused()],
            "flow": {k: v for k, v in throughput.items() if k != "queues"},
            "circuits": [circuit_view(c) for c in tracker.circuits()],
            "maintenance": [run.as_dict() for run in tracker.maintenance()],
            "scoped": False,
        }

    def jobs(self, request: Request, who: Identity) -> Response:
        try:
            shown = given(request.query_params, also=("cursor",))
        except InvalidFilter as exc:
            return self.dash.refuse(request, who, 400, str(exc))
        owner = self.dash.scoped(who)
        if owner is not False:
            shown["owner_id"] = owner
        cursor = request.query_params.get("cursor") or None
        try:
            if owner is None:
                found, next_cursor = [], None
            else:
                page = self.dash.tracker.jobs(limit=PAGE, cursor=cursor, **filters_of(shown))
                found, next_cursor = list(page.jobs), page.next_cursor
        except InvalidFilter as exc:
            return self.dash.refuse(request, who, 400, str(exc))
        data = {
            "jobs": [job_view(j, self.masking) for j in found],
            "next_cursor": next_cursor,
            "filters": shown,
            "query": query_of(shown),
            "next_query": None if next_cursor is None else query_of(shown, cursor=next_cursor),
            "statuses": STATUSES,
            "names": NAMES,
        }
        return self._show(request, who, "jobs.html", data)

    def _visible(self, who: Identity, job: Job | None) -> Job | None:
        owner = self.dash.scoped(who)
        return job if job is None or owner is False or job.owner_id == owner else None

    def job(self, request: Request, who: Identity) -> Response:
        job_id = request.path_params["job_id"]
        tracker = self.dash.tracker
        try:
            job = self._visible(who, tracker.get_job(job_id))
        except (TypeError, InvalidPayload):  # not a job id at all
            job = None
        if job is None:
            return self.dash.refuse(request, who, 404, "no such job")
        data = {
            "job": job_view(job, self.masking),
            "arguments": arguments(job, self.masking),
            "history": [event_view(e, self.masking) for e in tracker.history(job.id)],
            **self._family(who, job),
        }
        return self._show(request, who, "job.html", data)

    def _family(self, who: Identity, job: Job) -> dict[str, Any]:
        """The job's pipeline as a tree (the first :data:`TREE` jobs) and its children."""
        if not job.correlation_id:
            return {"tree": [], "children": [], "more": False}
        try:
            found = self.dash.tracker.pipeline(job.correlation_id)
        except JobNotFound:
            return {"tree": [], "children": [], "more": False}
        rows = [(d, self._visible(who, j)) for d, j in found.tree()]
        tree = [{"depth": d, "job": job_view(j, self.masking)} for d, j in rows if j is not None]
        shown = [self._visible(who, j) for j in found.children(job.id)]
        children = [job_view(j, self.masking) for j in shown if j is not None]
        return {"tree": tree[:TREE] if len(tree) > 1 else [], "children": children,
                "more": len(tree) > TREE}  # fmt: skip

    def pipeline(self, request: Request, who: Identity) -> Response:
        try:
            found = self.dash.tracker.pipeline(request.path_params["cid"])
        except (JobNotFound, TypeError, InvalidPayload):
            return self.dash.refuse(request, who, 404, "no such pipeline")
        tree = [(depth, self._visible(who, job)) for depth, job in found.tree()]
        rows = [{"depth": d, "job": job_view(j, self.masking)} for d, j in tree if j is not None]
        if not rows:
            return self.dash.refuse(request, who, 404, "no such pipeline")
        if self.dash.scoped(who) is not False:  # its state and counts of the jobs shown
            found = Pipeline(found.correlation_id, tuple(j for _, j in tree if j is not None))
        data: dict[str, Any] = {"cid": found.correlation_id, "state": found.state, "rows": rows}
        data["counts"] = found.counts
        return self._show(request, who, "pipeline.html", data)

    def actions(self, request: Request, who: Identity) -> Response:
        raw = request.query_params.get("before")
        try:
            before = None if not raw else int(raw)
            found = self.dash.tracker.actions(before=before, limit=PAGE)
        except (ValueError, InvalidFilter):
            return self.dash.refuse(request, who, 400, "before: an action id")
        if self.dash.scoped(who) is not False:
            found = []  # the log names every tenant's jobs
        entries = [a.as_dict() for a in found]
        more = len(found) == PAGE
        data = {"entries": entries, "before": found[-1].id if more and found else None}
        return self._show(request, who, "actions.html", data)

    # -- signing in (TokenAuth) -------------------------------------------------------

    async def login(self, request: Request) -> Response:
        dash = self.dash
        if not isinstance(dash.auth, TokenAuth):
            return dash.refuse(request, None, 404, "sign in through your application")
        if request.method == "GET":
            return dash.render(request, None, "login.html", error=None)
        form = await request.form()
        if not csrf_ok(dash.signer, None, request, _text(form.get(CSRF_FIELD))):
            return dash.refuse(request, None, 403, "the form's CSRF token is missing or wrong")
        client = dash.client(request)
        if not dash.throttle.allowed(client):
            return dash.refuse(request, None, 429, "too many wrong tokens: try again later")
        who = dash.auth.identity(_text(form.get("token")) or "")
        if who is None:
            dash.throttle.failed(client)
            logger.warning("dashboard: a sign-in with a wrong token from %s", client)
            return dash.render(request, None, "login.html", 401, error="wrong token")
        response = RedirectResponse(dash.base(request) + "/", status_code=303)
        dash.set_cookie(
            request, response, SESSION_COOKIE, dash.signer.session(who, dash.auth.stamp(who.role))
        )
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse(self.dash.base(request) + "/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=self.dash.base(request) or "/")
        return response


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
