"""Every test that reaches the shared system Redis goes through tests/shared_redis.py, which
claims a database for the run alone: no other test file spells the server's address or picks
a database of it by number (a fixed number would collide with another run on the machine)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
# A URL or client arguments that point at the system Redis: 127.0.0.1 / localhost on 6379.
SYSTEM_REDIS = re.compile(
    r"(redis|rediss|valkey)://[^/\s\"']*(127\.0\.0\.1|localhost)(:6379)?(/\d+)?[\"'/]"
    r"|port\s*=\s*6379|BASE_URL\s*}/\d"
)
# Webhook targets the SSRF tests refuse: a Redis address as a URL the ledger must not call.
REFUSED_TARGET = re.compile(r"(gopher|https?)://127\.0\.0\.1:6379")


def test_only_shared_redis_names_the_system_redis() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == "shared_redis.py" or path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SYSTEM_REDIS.search(line) and not REFUSED_TARGET.search(line):
                found.append(f"{path.relative_to(TESTS.parent)}:{number}: {line.strip()}")
    assert not found, "use the system_redis fixture (tests/shared_redis.py):\n" + "\n".join(found)


def test_the_pattern_finds_what_it_is_for() -> None:
    assert SYSTEM_REDIS.search('Redis.from_url("redis://127.0.0.1:6379/3")')
    assert SYSTEM_REDIS.search("url = 'redis://localhost/0'")
    assert SYSTEM_REDIS.search("redis.Redis(host='127.0.0.1', port=6379, db=2)")
    assert SYSTEM_REDIS.search('redis.Redis.from_url(f"{shared_redis.BASE_URL}/1")')
    assert not SYSTEM_REDIS.search('"--redis-url", "redis://r:6379/0"')  # only parsed
    assert REFUSED_TARGET.search('"gopher://127.0.0.1:6379/_FLUSHALL": "only http and https"')
