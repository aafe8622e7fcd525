"""Throughput benchmark: plain Celery, celery-tracked and the peer, in one run.

    python bench/run.py [--jobs 5000] [--sleep-jobs 800] [--repeat 3] [--log-level INFO]

Three contenders with the same bodies (``bench/app.py``, ``bench/peer_app.py``): plain
``@app.task(acks_late=True)``, ``@tracked_task`` at the library's defaults, and Celery with
its database result backend and ``task_track_started=True``. Each round runs the three back
to back (the order alternates between rounds): publish all jobs from a child process
(timing every ``apply_async``), then start one ``celery worker -P prefork -c 2 -l INFO``
and time the bodies from the first to the last one. Server counters around each half give
the cost per enqueue and per job. Prints the tables and writes
``bench/results/latest.json``. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.own_redis import own_redis  # noqa: E402

own_redis("BENCH_BROKER_URL", "BENCH_REDIS_URL")  # before bench.common reads them

from bench import common, report  # noqa: E402
from bench.contenders import (  # noqa: E402
    RESULTS,
    flush_redis,
    fresh_database,
    log,
    percentile,
    run_phase,
)

__all__ = ["fresh_database", "main", "percentile"]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000, help="no-op jobs per phase")
    parser.add_argument("--sleep-jobs", type=int, default=800, help="10 ms jobs per phase")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (medians reported)")
    parser.add_argument("--only", choices=report.KINDS, help="run only one kind of body")
    parser.add_argument(
        "--contenders",
        default=",".join(report.CONTENDERS),
        help="comma-separated subset of plain,tracked,peer",
    )
    parser.add_argument(
        "--log-level", default="INFO", help="the worker's -l (INFO as users run it; WARNING)"
    )
    parser.add_argument("--output", type=Path, default=RESULTS / "latest.json")
    args = parser.parse_args()
    args.contenders = [c for c in args.contenders.split(",") if c]
    if args.jobs < 2 or args.sleep_jobs < 2 or args.repeat < 1:
        parser.error("--jobs and --sleep-jobs must be >= 2, --repeat >= 1")
    if not set(args.contenders) <= set(report.CONTENDERS):
        parser.error("--contenders: plain, tracked, peer")
    return args


def main() -> None:
    args = parse()
    log("fresh databases, migrations, flush Redis")
    fresh_database(common.DATABASE_URL)
    if "peer" in args.contenders:
        fresh_database(common.PEER_DATABASE_URL, migrations=False)
    flush_redis()

    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    kinds = [k for k in report.KINDS if not args.only or k == args.only]
    for round_no in range(args.repeat):
        order = args.contenders if round_no % 2 == 0 else args.contenders[::-1]
        for kind in kinds:
            jobs = args.jobs if kind == "noop" else args.sleep_jobs
            for contender in order:
                result = run_phase(contender, kind, jobs, args.log_level)
                runs.setdefault((contender, kind), []).append(result)

    merged = {
        (c, k): report.merge(runs[(c, k)]) for k in kinds for c in args.contenders if (c, k) in runs
    }
    ratio = report.ratios(runs)
    report.print_main(merged, ratio)
    report.print_costs(merged)
    document = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "method": "per round, per kind, each contender: publish all jobs from a child "
        "process, then start the worker; throughput = (N-1) / (last body - first body)",
        "results": {f"{c} {k}": row for (c, k), row in merged.items()},
        "rounds": {f"{c} {k}": r for (c, k), r in runs.items()},
        "ratios": ratio,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2, default=str) + "\n")
    log(f"wrote {args.output}")


if __name__ == "__main__":
    main()
