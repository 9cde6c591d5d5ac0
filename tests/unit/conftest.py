"""The unit tests run without Redis and without a server: a unit test that asks for one of the
fixtures that start or reach one fails (it belongs in tests/integration or tests/api), so the
unit loop stays about a minute long and runs anywhere."""

from __future__ import annotations

import pytest

# The fixtures of tests/conftest.py that start a server or reach one.
SERVER_FIXTURES = frozenset(
    {
        "api",
        "clean_redis",
        "embedded_valkey",
        "redis_url",
        "store",
        "system_redis",
        "valkey_cluster",
    }
)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Runs for the items below this folder only, before any fixture is set up (so before any
    server starts): a failure, not a skip, so a misplaced test cannot pass unnoticed."""
    used = sorted(SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())))
    if used:
        pytest.fail(
            f"a unit test may not use {', '.join(used)}: move it to tests/integration/<feature>/"
            " (or tests/api/ when it goes through HTTP)",
            pytrace=False,
        )
