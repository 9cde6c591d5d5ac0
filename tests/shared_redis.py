"""A database of the shared system Redis that belongs to this test run alone.

The Redis on 127.0.0.1:6379 is shared: other test runs on the same machine and other users
may be using it. A run therefore claims one database for itself: it holds an exclusive
`flock` on a per-database lock file for as long as the run lives, and it takes a database
only when that database is empty or was last used by a trainledger test run (the lock file
exists from then), and no other connection has it selected (a server left running by
an earlier, killed run would still be writing there). Two concurrent
runs never get the same database, and a database with somebody else's keys is never
flushed. `TRAINLEDGER_TEST_SYSTEM_REDIS` overrides the choice.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import IO

import redis

BASE_URL = "redis://127.0.0.1:6379"
LOCK_DIR = Path(tempfile.gettempdir()) / "trainledger-test-redis"

_held: list[IO[str]] = []  # lock files kept open (and locked) for the life of the run


def _reachable(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_timeout=0.5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


def _selected_elsewhere(client: redis.Redis, db: int) -> bool:
    """Whether a connection other than `client`'s own has database `db` selected."""
    own = client.client_id()
    return any(
        int(entry.get("db", -1)) == db and int(entry["id"]) != own for entry in client.client_list()
    )


def claim_database(base_url: str = BASE_URL, databases: range = range(15, 0, -1)) -> str | None:
    """The URL of a database this run now owns, or None when no server or no free database."""
    override = os.environ.get("TRAINLEDGER_TEST_SYSTEM_REDIS")
    if override:
        return override if _reachable(override) else None
    if not _reachable(base_url):
        return None
    LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    port = base_url.rsplit(":", 1)[-1]
    for db in databases:
        path = LOCK_DIR / f"{port}-db{db}.lock"
        used_by_us_before = path.exists()
        handle = path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()  # another run holds it
            continue
        url = f"{base_url}/{db}"
        client = redis.Redis.from_url(url, socket_timeout=0.5)
        try:
            empty = client.dbsize() == 0
            in_use = _selected_elsewhere(client, db)
        finally:
            client.close()
        if (empty or used_by_us_before) and not in_use:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()}\n")
            handle.flush()
            _held.append(handle)
            return url
        fcntl.flock(handle, fcntl.LOCK_UN)  # somebody else's keys live there
        handle.close()
        if not used_by_us_before:
            path.unlink(missing_ok=True)
    return None
