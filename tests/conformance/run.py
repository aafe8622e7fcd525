"""``make conformance``: Celery's own integration suite, plain and with ``TrackedTask``.

The sdist of the installed Celery (``pip download --no-binary :all: --no-deps
celery==<version>``, cached in the git-ignored ``.conformance/``) is unpacked (only its
``t/`` tests and its ``pyproject.toml``: the installed Celery is the one tested), and its
``t/integration`` suite runs twice against a private ``redis-server`` (a free port, data
in /dev/shm, killed at the end; never the shared 6379), test files unchanged:

1. **plain**: as Celery's CI runs it with Redis as broker and backend;
2. **tracked**: every task of the suite's app built on ``TrackedTask`` (the app's
   ``task_cls``, set by ``ct_conformance_plugin.py``), tracking in a SQLite file of its
   own and the guard on another database of the private Redis.

Then each test that passed plain and failed tracked runs once more, alone and tracked
(``confirmed`` when it fails again, ``flaky`` otherwise), the table of both runs is printed
(and written to ``.conformance/report-<mode>.txt``), and the exit status is 1 when a
confirmed regression is not on the list of deliberate differences (``deliberate.py``,
each with its reason; docs/converting.md lists them too).

    CONFORMANCE          ``full`` (default) or ``quick`` (``QUICK_FILES``: CI's budget)
    CONFORMANCE_FILES    test files to run instead (``t/integration/test_tasks.py ...``)
    CONFORMANCE_TIMEOUT  seconds a test may take (default 300, Celery's own longest mark)
    CONFORMANCE_MODES    ``plain,tracked`` (default), or one of them (empty: none): the
                         others' last results (saved in ``.conformance/``) are used
    CONFORMANCE_ARGS     more pytest arguments (e.g. ``-k chord``), both runs
    CONFORMANCE_KEEP     1: keep the unpacked suite and the logs (printed path)

Celery's ``flaky`` mark (pytest-rerunfailures) is switched off in both runs (``-p
no:rerunfailures``): it would rerun a test failing for a deterministic reason five times;
the confirmation run above stands in for it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from ..own_services import SCRATCH, RedisServer
from .report import Outcome, deliberate, read_junit, table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CACHE = ROOT / ".conformance"
#: ``CONFORMANCE=quick``: a few files that fit CI's budget (tests/README.md: timings).
QUICK_FILES = ("t/integration/test_inspect.py", "t/integration/test_redis_backend.py")
SUITE_GLOB = "t/integration/test_*.py"
MODES = ("plain", "tracked")
#: A test file's process is killed after this long (its tests then count as missing).
FILE_TIMEOUT_S = 3600


def sdist(celery_version: str) -> Path:
    """The cached sdist of ``celery==celery_version``, downloaded from the index once."""
    dist = CACHE / "dist"
    found = sorted(dist.glob(f"celery-{celery_version}.tar.gz"))
    if found:
        return found[0]
    dist.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps"]
    command += ["-q", "-d", str(dist), f"celery=={celery_version}"]
    subprocess.run(command, check=True)
    return dist / f"celery-{celery_version}.tar.gz"


def unpack(archive: Path, target: Path) -> Path:
    """Celery's ``t/`` and ``pyproject.toml`` (pytest's settings) into ``target``."""
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        wanted = [
            m
            for m in tar.getmembers()
            if m.name == f"{top}/pyproject.toml" or m.name.startswith(f"{top}/t/")
        ]
        tar.extractall(target, members=wanted, filter="data")
    return target / top


def pytest_command(suite: Path, junit: Path, selection: list[str]) -> list[str]:
    command = [sys.executable, "-m", "pytest", *selection, "-q", "-rfE", f"--junitxml={junit}"]
    command += ["-p", "no:celery_tracked", "-p", "no:rerunfailures", "-p", "no:xdist"]
    command += ["--continue-on-collection-errors"]  # a module Celery's CI has extras for
    command += ["-p", "no:cacheprovider", "-p", "ct_conformance_plugin", f"--rootdir={suite}"]
    return command + os.environ.get("CONFORMANCE_ARGS", "").split()


def environment(mode: str, redis: RedisServer, work: Path) -> dict[str, str]:
    url = f"redis://127.0.0.1:{redis.port}"
    env = dict(os.environ, CONFORMANCE_MODE=mode, PYTHONPATH=str(HERE), PYTHONUNBUFFERED="1")
    # the ``celery`` command some tests run: this interpreter's, as `make` does not
    # activate the virtual environment
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(TEST_BROKER=f"{url}/0", TEST_BACKEND=f"{url}/0")
    env.update(REDIS_HOST="127.0.0.1", REDIS_PORT=str(redis.port))
    for name in [n for n in env if n.startswith("CELERY_TRACKED_")]:
        del env[name]
    if mode == "tracked":
        from celery_tracked.migrate import upgrade

        database = f"sqlite:///{work / 'tracked.sqlite3'}"
        upgrade(database)
        env.update(CELERY_TRACKED_DATABASE_URL=database, CELERY_TRACKED_REDIS_URL=f"{url}/5")
    return env


def run_mode(
    mode: str, suite: Path, redis: RedisServer, work: Path, selection: list[str], tag: str
) -> tuple[dict[str, Outcome], dict[str, float]]:
    """``selection`` (files or node ids) in ``mode``, one pytest process per test file on
    a flushed Redis (a file that wedges its process, as ``test_backend_leak_in_fixture_
    teardown.py`` does here, costs only its own tests): outcomes, seconds per file."""
    env = environment(mode, redis, work)
    by_file: dict[str, list[str]] = {}
    for item in selection:
        by_file.setdefault(item.split("::")[0], []).append(item)
    outcomes: dict[str, Outcome] = {}
    seconds: dict[str, float] = {}
    for number, (path, items) in enumerate(sorted(by_file.items())):
        redis_flush(redis)
        name = f"{tag}-{number:02d}-{Path(path).stem}"
        junit, log = work / f"{name}.xml", work / f"{name}.log"
        started = time.monotonic()
        with log.open("w") as out:
            try:
                subprocess.run(
                    pytest_command(suite, junit, items),
                    cwd=suite,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    check=False,
                    timeout=FILE_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired:
                out.write(f"\nconformance: killed after {FILE_TIMEOUT_S} s\n")
        seconds[path] = time.monotonic() - started
        lines = log.read_text().rstrip().splitlines()
        print(f"{tag:<13} {path:<58} {seconds[path]:5.0f} s  {lines[-1] if lines else ''}")
        outcomes.update(read_junit(junit, suite))
        for item in items:  # a killed process wrote no JUnit file
            if "::" in item and item not in outcomes:
                outcomes[item] = Outcome("missing", "not run: see " + log.name)
    return outcomes, seconds


def redis_flush(redis: RedisServer) -> None:
    import redis as redis_client

    client = redis_client.Redis(host="127.0.0.1", port=redis.port)
    client.flushall()
    client.close()


def main() -> int:
    quick = os.environ.get("CONFORMANCE", "full") == "quick"
    keep = os.environ.get("CONFORMANCE_KEEP") == "1"
    celery_version = version("celery")
    archive = sdist(celery_version)
    work = Path(tempfile.mkdtemp(prefix="ct-conformance-", dir=SCRATCH))
    redis = RedisServer()
    try:
        suite = unpack(archive, work)
        files = sorted(p.relative_to(suite).as_posix() for p in suite.glob(SUITE_GLOB))
        chosen = os.environ.get("CONFORMANCE_FILES", "").split()
        selection = chosen or (list(QUICK_FILES) if quick else files)
        scope = "files" if chosen else "quick" if quick else "full"
        results: dict[str, dict[str, Outcome]] = {}
        seconds: dict[str, dict[str, float]] = {}
        for mode in MODES:
            if mode in chosen_modes():
                results[mode], seconds[mode] = run_mode(mode, suite, redis, work, selection, mode)
                save_run(scope, mode, celery_version, results[mode], seconds[mode])
            else:  # the last run of this mode (the plain results do not change with ours)
                results[mode], seconds[mode] = load_run(scope, mode, celery_version)
        plain, tracked = results["plain"], results["tracked"]
        known = deliberate()
        regressed = sorted(
            t
            for t in plain
            if plain[t].passed and tracked.get(t, _none()).failed and t not in known
        )
        confirmed: dict[str, Outcome] = {}
        if regressed:
            confirmed, _ = run_mode("tracked", suite, redis, work, regressed, "tracked-again")
        text, unexpected = table(plain, tracked, confirmed, known, seconds, celery_version)
        report = CACHE / f"report-{scope}.txt"
        report.write_text(text)
        print(text)
        print(f"(also in {report})")
        return 1 if unexpected else 0
    finally:
        redis.stop()
        if keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def chosen_modes() -> list[str]:
    """``CONFORMANCE_MODES``: the modes to run (default both); the others' last results
    are read from ``.conformance/``."""
    given = [m for m in os.environ.get("CONFORMANCE_MODES", ",".join(MODES)).split(",") if m]
    unknown = set(given) - set(MODES)
    if unknown:
        raise SystemExit(f"CONFORMANCE_MODES: unknown {sorted(unknown)}; choose from {MODES}")
    return given


def save_run(
    scope: str, mode: str, celery_version: str, outcomes: dict[str, Outcome], took: dict[str, float]
) -> None:
    CACHE.mkdir(exist_ok=True)
    data = {"celery": celery_version, "seconds": took}
    data["outcomes"] = {t: [o.status, o.message] for t, o in outcomes.items()}
    (CACHE / f"outcomes-{scope}-{mode}.json").write_text(json.dumps(data, indent=1))


def load_run(
    scope: str, mode: str, celery_version: str
) -> tuple[dict[str, Outcome], dict[str, float]]:
    path = CACHE / f"outcomes-{scope}-{mode}.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    if data.get("celery") != celery_version:
        print(f"{mode}: no {scope} run of Celery {celery_version} saved (run it): no results")
        return {}, {}
    print(f"{mode}: the last {scope} run's results ({path})")
    outcomes = {t: Outcome(status, message) for t, (status, message) in data["outcomes"].items()}
    return outcomes, data["seconds"]


def _none() -> Outcome:
    return Outcome("missing", "not run")


if __name__ == "__main__":
    sys.exit(main())
