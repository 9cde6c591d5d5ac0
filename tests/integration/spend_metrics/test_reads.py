"""The spend figures' reads against real servers: one that answers, one that never does, one
that is not there. A scrape never waits past its deadline."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from trainledger.ratecards.catalog import RateCards
from trainledger.spend_metrics.service import SpendGauges
from trainledger.spend_metrics.settings import SpendConfig
from trainledger.stores import Stores


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """A TCP server that accepts connections and never answers a byte."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"redis://127.0.0.1:{port}/0"
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


async def test_a_read_past_the_deadline_answers_without_the_figures(silent_server: str) -> None:
    store = Stores.from_url(silent_server)
    gauges = SpendGauges(SpendConfig(ttl_seconds=0, deadline_seconds=0.2))
    try:
        snapshot, ok = await gauges.figures(store, RateCards(store))
        assert (snapshot, ok) == (None, False)
        assert gauges.reading  # left to go on, not cancelled; the next scrape waits for it
        again, ok = await gauges.figures(store, RateCards(store))
        assert (again, ok) == (None, False)
    finally:
        await store.close()  # the read in flight fails on the closed connection
        for _ in range(100):
            if not gauges.reading:
                break
            await asyncio.sleep(0.05)


async def test_a_server_that_is_not_there_is_a_failed_read() -> None:
    with socket.socket() as taken:  # a port nothing listens on
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
    store = Stores.from_url(f"redis://127.0.0.1:{port}/0")
    gauges = SpendGauges(SpendConfig(ttl_seconds=0, deadline_seconds=30))
    try:
        assert await gauges.figures(store, RateCards(store)) == (None, False)
        assert not gauges.reading
    finally:
        await store.close()


async def test_figures_are_kept_for_the_ttl(store: Stores) -> None:
    gauges = SpendGauges(SpendConfig(ttl_seconds=3600, deadline_seconds=30))
    first, ok = await gauges.figures(store, RateCards(store))
    assert ok and first is not None and first.projects == []
    await store.projects.add_project("late")
    kept, _ = await gauges.figures(store, RateCards(store))
    assert kept is first  # within the TTL: no read
    fresh = SpendGauges(SpendConfig(ttl_seconds=0, deadline_seconds=30))
    read, _ = await fresh.figures(store, RateCards(store))
    assert read is not None and [p.project for p in read.projects] == ["late"]
