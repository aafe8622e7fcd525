"""The dashboard at scale (issue 28): its pages' server time on a 1,000,000-row table.

    python bench/web.py [--rows 1000000] [--reuse] [--times 30]

A PostgreSQL database ``ct_bench_web`` created, migrated and filled like ``make
bench-scale``'s (``bench/big_table.py``'s ``prepare``, ``bench/big_fill.py``'s mix: 2
events per job); ``--reuse`` keeps a filled one. Then the dashboard (``TokenAuth``, a
bearer token) is called in process through Starlette's ``TestClient`` (no network: the
time is the app's, plus well under a millisecond of client), median and p95 of
``--times`` calls each:

- the job list's first page (no filter), and with ``status=failed&queue=default``;
- its 100th page (the cursor reached by following 99 ``next_cursor`` links; keyset, so
  the 100th page costs what the first does);
- a job's page (a random existing job each call: fields, history, children);
- the overview (its cache dropped before each call, so each is a real read: ``stats``).

Prints a table and writes ``bench/results/web-latest.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.big_table import RESULTS, _job_id, log, prepare, url_of  # noqa: E402

NAME = "ct_bench_web"
TOKEN = "bench-admin-token-0123456789"


def _timed(call: Any, times: int) -> dict[str, float]:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        reply = call()
        spent.append((time.perf_counter() - started) * 1000)
        assert reply.status_code == 200, reply.text[:500]
    spent.sort()
    return {
        "median_ms": round(statistics.median(spent), 2),
        "p95_ms": round(spent[int(len(spent) * 0.95) - 1], 2),
    }


def measure(rows: int, times: int) -> dict[str, Any]:
    from celery import Celery
    from starlette.testclient import TestClient

    from celery_tracked.web import TokenAuth, dashboard

    app = Celery("bench_web", set_as_current=False)
    app.conf.tracked_database_url = url_of(NAME)
    app.conf.tracked_redis_url = "memory://"  # reads only: no Redis needed
    web = dashboard(app, auth=TokenAuth(admin=TOKEN))
    client = TestClient(web, headers={"Authorization": f"Bearer {TOKEN}"})
    dash = web.state.dash
    out: dict[str, Any] = {}
    client.get("/jobs")  # warm up: connections, templates
    out["list, first page"] = _timed(lambda: client.get("/jobs"), times)
    out["list, failed of one queue"] = _timed(
        lambda: client.get("/jobs?status=failed&queue=default"), times
    )
    path = "/jobs"
    for _ in range(99):
        html = client.get(path).text
        path = re.search(r'href="(/jobs\?[^"]*cursor=[^"]+)"', html).group(1)  # type: ignore[union-attr]
        path = path.replace("&amp;", "&")
    out["list, 100th page"] = _timed(lambda: client.get(path), times)
    ids = [_job_id(random.randint(1, rows * 9 // 10)) for _ in range(times)]
    picks = iter(ids * 2)
    out["job page"] = _timed(lambda: client.get(f"/jobs/{next(picks)}"), times)

    def overview() -> Any:
        dash.forget()
        return client.get("/")

    out["overview (uncached)"] = _timed(overview, max(5, times // 5))
    out["overview (cached)"] = _timed(lambda: client.get("/"), times)
    client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--times", type=int, default=30)
    options = parser.parse_args()
    info = prepare(NAME, options.rows, 2, options.reuse)
    log(f"{NAME}: {info.get('rows')} rows, {info.get('size')}")
    found = measure(options.rows, options.times)
    print(f"{'page':32} {'median ms':>10} {'p95 ms':>8}")
    for page, numbers in found.items():
        print(f"{page:32} {numbers['median_ms']:>10.1f} {numbers['p95_ms']:>8.1f}")
    RESULTS.mkdir(exist_ok=True)
    result = {"database": info, "pages": found, "cpus": os.cpu_count()}
    (RESULTS / "web-latest.json").write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
