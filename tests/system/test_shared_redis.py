"""Two test runs on one machine never share a database of the system Redis."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import uuid

import pytest
import redis

from tests import shared_redis

_CLAIM = (
    "import sys; from tests.shared_redis import claim_database;"
    "print(claim_database(databases=range({hi}, {lo}, -1)), flush=True); sys.stdin.read()"
)


@pytest.fixture
def reachable() -> None:
    if not shared_redis._reachable(shared_redis.BASE_URL):
        pytest.skip("no system Redis on 127.0.0.1:6379")


def test_concurrent_runs_get_different_databases(
    reachable: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAINLEDGER_TEST_SYSTEM_REDIS", raising=False)
    # Another run (a process of its own) claims one of the databases 1..15 and keeps it.
    other = subprocess.Popen(
        [sys.executable, "-c", _CLAIM.format(hi=15, lo=0)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None
        theirs = other.stdout.readline().strip()
        if theirs == "None":
            pytest.skip("no database of the system Redis is free")
        ours = shared_redis.claim_database()
        assert ours is not None and ours != theirs
    finally:
        other.communicate("")


def test_a_database_holding_somebody_elses_keys_is_not_taken(
    reachable: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAINLEDGER_TEST_SYSTEM_REDIS", raising=False)
    # Somebody else's key in a database no test run has used (no lock file for it). The
    # database is one this run claimed first, never a fixed number: no other run is writing
    # there, and the key is put in before the claim is given up.
    url = shared_redis.claim_database()
    if url is None:
        pytest.skip("no database of the system Redis is free")
    db = int(url.rsplit("/", 1)[-1])
    lock = shared_redis.LOCK_DIR / f"6379-db{db}.lock"
    client = redis.Redis.from_url(url)
    key = f"someone-else:{uuid.uuid4().hex}"
    client.set(key, "theirs", ex=60)
    handle = shared_redis._held.pop()  # the claim just made: give it up, lock file and all
    lock.unlink()
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()
    try:
        assert shared_redis.claim_database(databases=range(db, db - 1, -1)) is None
        assert client.get(key) == b"theirs"
        assert not lock.exists()
    finally:
        client.delete(key)
        client.close()


def test_a_database_an_orphaned_server_still_uses_is_not_taken(
    reachable: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAINLEDGER_TEST_SYSTEM_REDIS", raising=False)
    # A run was killed; its lock is free but a server it started still has the database
    # selected (here: a connection kept open after the claim is given up).
    url = shared_redis.claim_database()
    if url is None:
        pytest.skip("no database of the system Redis is free")
    db = int(url.rsplit("/", 1)[-1])
    orphan = redis.Redis.from_url(url)
    orphan.ping()
    handle = shared_redis._held.pop()
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()
    try:
        assert shared_redis.claim_database(databases=range(db, db - 1, -1)) is None
        orphan.close()
        assert shared_redis.claim_database(databases=range(db, db - 1, -1)) == url
    finally:
        orphan.close()
