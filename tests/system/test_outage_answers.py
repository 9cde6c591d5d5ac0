"""A request during a Valkey outage gets an HTTP answer (a 503 problem with Retry-After),
never a closed connection (issue 33 item 7).

The FOCUS export is a stream: its answer used to start (200 and its headers) before the
stream's first read of the log, so a Valkey that died between the export's preparation
and that read left the caller with a 200 cut after its headers, a closed connection, rather
than the 503 it could retry. Here the Valkey (a real one, of this test alone) is SIGKILLed
at exactly that moment: the read of the log is wrapped so that the kill comes first.
The by-hand soak of the same rule, on many endpoints, is tests/soak_outage.py.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trainledger.export.stream as export_stream
from trainledger.export.focus import HEADER
from trainledger.storage.embedded import EmbeddedValkey

from tests.api.test_budgets import this_month
from tests.conftest import TEST_CARD, ServerThread, event, make_admin_token


@pytest.fixture
def valkey() -> Iterator[EmbeddedValkey]:
    """A Valkey of this test alone (it gets killed), in a directory whose unix socket path
    fits in sun_path."""
    path = Path(tempfile.mkdtemp(prefix="tl-outage-"))
    server = EmbeddedValkey(path / "valkey")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(path, ignore_errors=True)


async def test_an_export_whose_valkey_dies_before_its_first_read_answers_503(
    valkey: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = valkey.start()
    token = await make_admin_token(url)
    server = ServerThread(url).start()
    try:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as c:
            assert (await c.put("/v1/rate-cards/default", json=TEST_CARD)).status_code == 201
            events = [event(f"e{i}", "1.5", project="out1", time=this_month()) for i in range(5)]
            r = await c.post("/v1/events", json=events)
            assert r.status_code == 200 and r.json()["accepted"] == 5, r.text
            r = await c.get("/v1/export/focus", params={"project": "out1"})
            assert r.status_code == 200 and len(r.text.splitlines()) == 6  # header + 5 rows

            read_log_range: Callable[..., AsyncIterator[Any]] = export_stream.read_log_range

            def killed_first(*args: Any, **kw: Any) -> AsyncIterator[Any]:
                valkey.kill()  # SIGKILL, after the preparation read the card and the log's end
                return read_log_range(*args, **kw)

            monkeypatch.setattr(export_stream, "read_log_range", killed_first)
            try:
                r = await c.get("/v1/export/focus", params={"project": "out1"})
            except httpx.TransportError as exc:  # the 200 cut after its headers
                raise AssertionError(f"a closed connection, not an answer: {exc!r}") from exc
            assert r.status_code == 503, r.text
            assert int(r.headers["retry-after"]) >= 1
            assert r.headers["content-type"].startswith("application/problem+json")
    finally:
        server.stop()


async def test_an_export_cut_after_its_first_bytes_is_an_incomplete_body_the_client_sees(
    valkey: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the answer has started, an outage can only cut it: the chunked encoding is left
    unterminated, so the client gets an error, never a file that looks whole."""
    url = valkey.start()
    token = await make_admin_token(url)
    server = ServerThread(url).start()
    try:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as c:
            assert (await c.put("/v1/rate-cards/default", json=TEST_CARD)).status_code == 201
            when = this_month()
            for b in range(250):  # 250 log entries: more than one page of the log (200)
                batch = [event(f"e{b}-{i}", "1.5", project="out2", time=when) for i in range(4)]
                assert (await c.post("/v1/events", json=batch)).status_code == 200

            read_log_range: Callable[..., AsyncIterator[Any]] = export_stream.read_log_range

            async def killed_midway(*args: Any, **kw: Any) -> AsyncIterator[Any]:
                async for n, item in _numbered(read_log_range(*args, **kw)):
                    if n == 150:  # ~600 rows: the first chunks (64 KiB each) are sent
                        valkey.kill()
                    yield item

            monkeypatch.setattr(export_stream, "read_log_range", killed_midway)
            received = b""
            with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
                async with c.stream("GET", "/v1/export/focus", params={"project": "out2"}) as r:
                    assert r.status_code == 200
                    async for chunk in r.aiter_bytes():
                        received += chunk
            assert received.startswith(HEADER[0].encode())  # the first bytes arrived
            assert received.count(b"\n") < 1001  # not every row: the stream was cut
    finally:
        server.stop()


async def _numbered(items: AsyncIterator[Any]) -> AsyncIterator[tuple[int, Any]]:
    n = 0
    async for item in items:
        yield n, item
        n += 1
