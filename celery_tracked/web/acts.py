"""The dashboard's actions: the CLI's fenced moves through the tracker, admins only, each
with its CSRF token, each reported (what changed, what was refused and why) and written to
the action log with its actor (``Tracker.record_action``: an entry, and an ``action``
event on each job it changed).

A bulk action asks first: its form shows the filters and how many jobs they match now
(up to the limit), and acts only once that confirmation is posted back (``confirm=yes``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.actions import Done
from ..core.bulk import BulkReport
from ..core.errors import (
    EnqueueError,
    InvalidCircuit,
    InvalidFilter,
    InvalidPause,
    InvalidPayload,
    JobNotFound,
    RetryRefused,
    StoreError,
)
from .auth import CSRF_FIELD, Identity, csrf_ok
from .dash import Dash, failure
from .filters import filters_of, given, query_of

Action = Callable[[Request, Identity, FormData], Response]
Endpoint = Callable[[Request], Awaitable[Response]]
#: a bulk action acts on at most this many jobs at once (the report says when more match)
BULK_LIMIT = 1000
_WAITING = ("pending", "retrying")


class Acts:
    """The action routes (see the module's docstring)."""

    def __init__(self, dash: Dash) -> None:
        self.dash = dash

    def routes(self) -> list[Route]:
        post, act = ["POST"], self._act
        return [
            Route("/jobs/{job_id}/retry", act(self.retry), methods=post, name="retry"),
            Route("/jobs/{job_id}/cancel", act(self.cancel), methods=post, name="cancel"),
            Route("/bulk/{action}", act(self.bulk), methods=post, name="bulk"),
            Route("/pauses/{action}", act(self.pause), methods=post, name="pause"),
            Route("/cleanup/dry-run", act(self.cleanup), methods=post, name="cleanup"),
            Route("/circuits/{action}", act(self.circuit), methods=post, name="circuit"),
        ]

    def _act(self, action: Action) -> Endpoint:
        """The endpoint of ``action``: refused unless :meth:`_admin` lets it through, then
        run in the thread pool (the tracker's moves block; the event loop never does)."""

        async def endpoint(request: Request) -> Response:
            gate = await self._admin(request)
            if isinstance(gate, Response):
                return gate
            return await run_in_threadpool(action, request, *gate)

        return endpoint

    async def _admin(self, request: Request) -> tuple[Identity, FormData] | Response:
        """The admin who posted ``request`` with its CSRF token, and the form; else the
        refusal (401 anonymous, 403 read-only, 403 without a valid CSRF token)."""
        dash = self.dash
        who = await dash.gate(request, "sign in to act on jobs")
        if isinstance(who, Response):
            return who
        if not who.admin:
            return dash.refuse(request, who, 403, "read-only: acting on jobs needs the admin role")
        form = await request.form()
        token = form.get(CSRF_FIELD)
        if not dash.bearer(request) and not csrf_ok(
            dash.signer, who, request, token if isinstance(token, str) else None
        ):
            return dash.refuse(request, who, 403, "the form's CSRF token is missing or wrong")
        return who, form

    def _report(
        self, request: Request, who: Identity, done: Done, extra: Mapping[str, Any] | None = None
    ) -> Response:
        """Record ``done`` and show its report (a fragment for htmx, else a page)."""
        self.dash.tracker.record_action(done)
        self.dash.forget()
        data = {
            "action": done.action,
            "target": done.target,
            "changed": list(done.changed),
            "refused": dict(done.refused),
            "extra": dict(extra or {}),
        }
        page = "report_live.html" if request.headers.get("hx-request") else "report.html"
        return self.dash.render(request, who, page, report=data)

    # -- one job ----------------------------------------------------------------------

    def retry(self, request: Request, who: Identity, form: FormData) -> Response:
        job_id = request.path_params["job_id"]
        if not self._exists(job_id):
            return self.dash.refuse(request, who, 404, "no such job")
        refused: dict[str, str] = {}
        try:
            moved = self.dash.tracker.retry(job_id)
            if not moved:
                refused[job_id] = self._why_not(job_id, "retried", ("failed", "cancelled"))
        except JobNotFound:
            return self.dash.refuse(request, who, 404, "no such job")
        except (RetryRefused, EnqueueError, StoreError) as exc:
            refused[job_id] = failure(exc)
        changed = () if refused else (job_id,)
        done = Done(who.name, who.role, "retry", job_id, changed, refused)
        return self._report(request, who, done)

    def cancel(self, request: Request, who: Identity, form: FormData) -> Response:
        job_id = request.path_params["job_id"]
        running = form.get("running") == "yes"
        tracker = self.dash.tracker
        if not self._exists(job_id):
            return self.dash.refuse(request, who, 404, "no such job")
        reason = f"cancelled from the dashboard by {who.name}"
        refused: dict[str, str] = {}
        try:
            moved = tracker.cancel(job_id, reason, running=running)
            allowed = (*_WAITING, "processing") if running else _WAITING
            if not moved:
                refused[job_id] = self._why_not(job_id, "cancelled", allowed)
        except StoreError as exc:
            refused[job_id] = failure(exc)
        action = "cancel_running" if running else "cancel"
        done = Done(who.name, who.role, action, job_id, () if refused else (job_id,), refused)
        return self._report(request, who, done)

    def _exists(self, job_id: str) -> bool:
        try:
            return self.dash.tracker.get_job(job_id) is not None
        except (InvalidPayload, TypeError):  # not a job id at all (a NUL byte, too long)
            return False

    def _why_not(self, job_id: str, what: str, allowed: tuple[str, ...]) -> str:
        job = self.dash.tracker.get_job(job_id)
        if job is None:
            return "no such job"
        return f"it is {job.status.value}: only {', '.join(allowed)} jobs are {what}"

    # -- many jobs --------------------------------------------------------------------

    def bulk(self, request: Request, who: Identity, form: FormData) -> Response:
        action = request.path_params["action"]
        if action not in ("retry", "cancel"):
            return self.dash.refuse(request, who, 404, "no such bulk action")
        tracker = self.dash.tracker
        try:
            shown = given(form, also=(CSRF_FIELD, "confirm", "include_unrecoverable"))
            filters = filters_of(shown)
            if form.get("confirm") != "yes":
                return self._confirm(request, who, action, shown, filters)
            if action == "retry":
                everything = form.get("include_unrecoverable") == "yes"  # as the CLI's flag
                report = tracker.retry_many(
                    limit=BULK_LIMIT, include_unrecoverable=everything, **filters
                )
            else:
                reason = f"cancelled from the dashboard by {who.name}"
                report = tracker.cancel_many(limit=BULK_LIMIT, reason=reason, **filters)
        except InvalidFilter as exc:
            return self.dash.refuse(request, who, 400, str(exc))
        return self._bulk_report(request, who, action, shown, report)

    def _confirm(
        self, request: Request, who: Identity, action: str, shown: dict[str, Any], filters: Any
    ) -> Response:
        """The confirmation: the filters and how many jobs they match now (up to the
        limit; statuses the action never applies to are the tracker's refusal)."""
        statuses = shown.get("status") or (["failed"] if action == "retry" else list(_WAITING))
        page = self.dash.tracker.jobs(limit=BULK_LIMIT, **{**filters, "status": statuses})
        data: dict[str, Any] = {
            "action": action,
            "filters": shown,
            "query": query_of(shown),
            "matching": len(page),
            "more": page.next_cursor is not None,
            "limit": BULK_LIMIT,
            "fields": [(k, v) for k, vs in shown.items() for v in _listed(vs)],
        }
        return self.dash.render(request, who, "confirm.html", **data)

    def _bulk_report(
        self,
        request: Request,
        who: Identity,
        action: str,
        shown: dict[str, Any],
        found: BulkReport,
    ) -> Response:
        target = json.dumps(shown, sort_keys=True) if shown else "(all jobs)"
        done = Done(who.name, who.role, f"{action}_many", target, found.changed, found.refused)
        extra = {"skipped": len(found.skipped), "more": found.more, "query": query_of(shown)}
        return self._report(request, who, done, extra)

    # -- pauses and cleanup -----------------------------------------------------------

    def pause(self, request: Request, who: Identity, form: FormData) -> Response:
        action = request.path_params["action"]
        scope, name = str(form.get("scope") or "queue"), str(form.get("name") or "")
        scope_args: dict[str, Any] = {"everything": True} if scope == "all" else {scope: name}
        if action not in ("pause", "resume") or scope not in ("queue", "job_type", "all"):
            return self.dash.refuse(request, who, 400, "pause or resume a queue, job_type or all")
        tracker, refused = self.dash.tracker, {}
        try:
            if action == "pause":
                reason = str(form.get("reason") or "") or None
                tracker.pause(**scope_args, reason=reason, by=who.name)
                moved = True
            else:
                moved = tracker.resume(**scope_args)
                if not moved:
                    refused[f"{scope}:{name}"] = "it was not paused"
        except InvalidPause as exc:
            return self.dash.refuse(request, who, 400, str(exc))
        target = "everything" if scope == "all" else f"{scope}:{name}"
        done = Done(who.name, who.role, action, target, (), refused)
        return self._report(request, who, done, {"done": moved})

    def cleanup(self, request: Request, who: Identity, form: FormData) -> Response:
        report = self.dash.tracker.cleanup(dry_run=True)
        done = Done(who.name, who.role, "cleanup_dry_run", "retention", (), {})
        return self._report(request, who, done, {"would_remove": dict(report.removed)})

    def circuit(self, request: Request, who: Identity, form: FormData) -> Response:
        """Open or close a circuit breaker by hand (``Tracker.open_circuit`` /
        ``close_circuit``)."""
        action, name = request.path_params["action"], str(form.get("name") or "")
        if action not in ("open", "close"):
            return self.dash.refuse(request, who, 404, "no such circuit action")
        tracker, refused = self.dash.tracker, {}
        try:
            if action == "open":
                reason = str(form.get("reason") or "") or None
                tracker.open_circuit(name, reason=reason, by=who.name)
            elif not tracker.close_circuit(name):
                refused[name] = "it was closed"
        except InvalidCircuit as exc:  # an unknown name, a bad reason
            return self.dash.refuse(request, who, 400, str(exc))
        done = Done(who.name, who.role, f"{action}_circuit", f"circuit:{name}", (), refused)
        return self._report(request, who, done)


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]
