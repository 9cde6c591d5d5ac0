"""One line of sends per endpoint (service.webhooks.delivery.ordering)."""

from __future__ import annotations

import asyncio

from trainledger.webhooks.delivery.ordering import EndpointLines, entry_order


def test_entry_order_sorts_stream_ids_as_the_stream_does() -> None:
    ids = ["1796183824306-10", "1796183824306-2", "999-0", "1796183824307-0"]
    assert sorted(ids, key=entry_order) == [
        "999-0",
        "1796183824306-2",
        "1796183824306-10",
        "1796183824307-0",
    ]


async def test_one_endpoint_one_send_at_a_time_in_order_others_side_by_side() -> None:
    lines = EndpointLines()
    events: list[str] = []
    gate = asyncio.Event()

    def send(name: str, wait: bool) -> asyncio.Task[None]:
        async def run() -> None:
            events.append(f"start {name}")
            if wait:
                await gate.wait()
            events.append(f"end {name}")

        return lines.start(name[0], run)

    first = send("a1", wait=True)  # held until the gate opens
    rest = [send("a2", wait=False), send("a3", wait=False)]
    other = send("b1", wait=False)  # another endpoint: not held up
    await other
    assert events == ["start a1", "start b1", "end b1"]
    gate.set()
    await asyncio.gather(first, *rest)
    assert [e for e in events if e.split()[1].startswith("a")] == [
        "start a1",
        "end a1",
        "start a2",
        "end a2",
        "start a3",
        "end a3",
    ]


async def test_a_send_may_be_skipped_after_waiting() -> None:
    lines = EndpointLines()
    sent: list[str] = []

    async def record(name: str) -> None:
        sent.append(name)

    await asyncio.gather(
        lines.start("k", lambda: record("one")),
        lines.start("k", lambda: record("two"), lambda: False),
    )
    assert sent == ["one"]
