"""The suite leaves a Redis it does not own alone: someone's data in every database (0-15)
of the default Redis, 127.0.0.1:6379, is still there after the whole run.

``make test`` runs the two tests of this file apart: the first (``untouched_seed``) before
every other phase, seeding a key of its own in each of the 16 databases; the second
(``untouched_check``) after the last phase, checking each key and removing it. Between
them runs the whole suite: tests that flush their Redis databases, real workers, Beat, the
CLI, the demo and the user projects, in parallel. Run alone, or both in one pytest, the
check follows the seed at once (it then proves only that the two agree).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis

from tests.conftest import IN_CI, ROOT, _port_open

pytestmark = pytest.mark.untouched

#: Where the seed leaves its keys for the check (git-ignored; removed by the check).
STATE = ROOT / ".untouched-redis.json"
DATABASES = range(16)


def _default_redis() -> None:
    if not _port_open("127.0.0.1", 6379):
        if IN_CI:
            pytest.fail("no Redis on 127.0.0.1:6379 (CI=true)")
        pytest.skip("no Redis on 127.0.0.1:6379: nothing of anyone's to leave alone")


@pytest.mark.untouched_seed
def test_seed_a_key_in_every_database_of_the_default_redis() -> None:
    _default_redis()
    marker = uuid.uuid4().hex
    keys = {db: (f"celery-tracked-suite-canary:{marker}:{db}", f"value-{db}") for db in DATABASES}
    for db, (key, value) in keys.items():
        with redis.Redis(port=6379, db=db) as client:
            client.set(key, value, ex=7200)  # gone in 2 h should the check never run
    STATE.write_text(json.dumps({str(db): pair for db, pair in keys.items()}))
    assert Path(STATE).exists()


@pytest.mark.untouched_check
def test_every_database_of_the_default_redis_still_holds_its_key() -> None:
    _default_redis()
    if not STATE.exists():
        if IN_CI:
            pytest.fail(f"{STATE.name} is missing: the seed did not run before the suite")
        pytest.skip("the seed did not run (make test runs it first)")
    keys = {int(db): pair for db, pair in json.loads(STATE.read_text()).items()}
    lost = []
    for db, (key, value) in sorted(keys.items()):
        with redis.Redis(port=6379, db=db) as client:
            if client.get(key) != value.encode():
                lost.append(f"database {db} lost {key}")
            client.delete(key)
    STATE.unlink()
    assert sorted(keys) == list(DATABASES)
    assert not lost, lost
