"""The benches' own Redis: a ``redis-server`` each bench starts (a free port, no
persistence, killed with the bench), never the shared one on 6379.

The benches flush their Redis database between phases. On a Redis they did not start that
would delete someone else's data, so unless the caller names a Redis in the bench's
variables (then it is theirs to flush), :func:`own_redis` starts one and points those
variables at it; the worker processes a bench starts inherit them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.own_services import RedisServer  # noqa: E402

_servers: list[RedisServer] = []


def own_redis(*variables: str, database: int = 1) -> str:
    """The Redis URL the bench uses: the one every name in ``variables`` already gives (all
    set to the same URL), else a new private server's ``database``, written into each."""
    given = {os.environ[name] for name in variables if name in os.environ}
    if len(given) == 1 and all(name in os.environ for name in variables):
        return given.pop()
    if given:
        raise SystemExit(f"set all of {', '.join(variables)} to one Redis URL, or none of them")
    if not _servers:
        _servers.append(RedisServer())  # stopped at exit (atexit), and with this process
    url = f"redis://127.0.0.1:{_servers[0].port}/{database}"
    for name in variables:
        os.environ[name] = url
    return url
