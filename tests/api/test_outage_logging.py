"""A storage outage the service answers with a 503 is a WARNING line without a traceback, once
per request, not an "Uncaught exception" at ERROR (183 of 183 such 503s paged an operator for
an outage the service handled, `BusyLoadingError` among them); an unexpected exception keeps
its ERROR line and traceback. Over real HTTP, against a Valkey of the test's own, killed."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
from redis.exceptions import BusyLoadingError, ConnectionError
from trainledger.config import Settings
from trainledger.http.observability import log_exception, logging_config
from trainledger.storage.embedded import EmbeddedValkey

from tests.conftest import ServerThread, event, make_admin_token


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _logged(exc: Exception) -> list[logging.LogRecord]:
    logger = logging.getLogger("tests.outage")
    kept = Kept()
    logger.addHandler(kept)
    try:
        try:
            raise exc
        except Exception:
            log_exception(logger, {"type": "http", "method": "GET", "path": "/v1/costs"}, [])  # type: ignore[typeddict-item]
    finally:
        logger.removeHandler(kept)
    return kept.records


def test_a_storage_outage_is_a_warning_and_anything_else_an_error() -> None:
    for exc in (BusyLoadingError("Valkey is loading"), ConnectionError("refused")):
        (record,) = _logged(exc)
        assert record.levelno == logging.WARNING and record.exc_info is None, record
        assert "503" in record.getMessage() and type(exc).__name__ in record.getMessage()
    (record,) = _logged(KeyError("bug"))
    assert record.levelno == logging.ERROR and record.exc_info is not None
    config = logging_config("json")
    assert config.exception_logging_handler is log_exception


async def test_requests_during_an_outage_get_503s_logged_as_warnings(tmp_path: Path) -> None:
    valkey = EmbeddedValkey(tmp_path / "valkey")
    url = valkey.start()
    server = None
    kept = Kept()
    try:
        token = await make_admin_token(url)
        settings = Settings(redis_url=url, log_format="text", log_level="warning")
        server = ServerThread(url, settings).start()
        logging.getLogger("litestar").addHandler(kept)
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=60) as c:
            r = await c.get("/v1/costs", params={"project": "llm"})
            assert r.status_code in (200, 404), r.text
            await asyncio.to_thread(valkey.kill)
            statuses = []
            requests = [
                ("GET", "/v1/projects", None),
                ("GET", "/v1/costs?project=llm", None),
                ("POST", "/v1/events", [event("o1")]),
                ("GET", "/v1/export/focus?project=llm", None),
                ("GET", "/v1/reports/cost-effect?project=llm&format=csv", None),
                ("GET", "/ui/llm", None),
            ]
            for method, path, body in requests:
                r = await c.request(method, path, json=body)
                statuses.append(r.status_code)
                assert r.headers["content-type"].startswith("application/problem+json"), r.text
        assert statuses == [503] * len(requests), statuses
        outage = [k for k in kept.records if "answered 503" in k.getMessage()]
        assert len(outage) == len(requests), [k.getMessage() for k in kept.records]
        assert all(k.levelno == logging.WARNING and k.exc_info is None for k in outage)
        assert not [k for k in kept.records if k.levelno >= logging.ERROR]
    finally:
        logging.getLogger("litestar").removeHandler(kept)
        if server is not None:
            await asyncio.to_thread(server.stop)
        await asyncio.to_thread(valkey.stop)
