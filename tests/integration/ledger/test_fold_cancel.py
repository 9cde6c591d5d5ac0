"""A cancelled folder ends: wherever the cancel lands (a read of the log, the fold's script in
flight, a round that failed), the task is done soon after, and folds nothing more.

On Python 3.11, `asyncio.wait_for` drops a cancel that arrives as the awaited operation
completes, and redis-py wraps every socket write in it: a folder cancelled at that moment
kept folding, into the tests that followed it (they saw folds they had not started), and a
run hung at its end in pytest-asyncio's close of the loop, which waits for every cancelled
task. The sweep below cancels the folder at each event-loop iteration of its first rounds, so
it lands in that window on some command.
"""

from __future__ import annotations

import asyncio

import msgspec
from trainledger.auth.model import Principal
from trainledger.events.decoding import JSON, decode_events
from trainledger.ingest.service import Ingestor
from trainledger.ledger.folding import Folder
from trainledger.ratecards.catalog import RateCards
from trainledger.ratecards.model import RateCardIn
from trainledger.stores import Stores

from tests.conftest import TEST_CARD, event, free_port

ADMIN = Principal("test", "admin", None)
# Event-loop iterations after the start at which a folder is cancelled: past its start-up
# listing, the log reads and the fold's script of its first round.
_OFFSETS = 160
# Polls (1 ms each) a cancelled folder gets to end: a bound on waiting, not an assertion
# about speed (a folder that kept the cancel ends within one command's reply).
_POLLS = 2000


async def _cancel_after(folder: Folder, iterations: int) -> asyncio.Task[None]:
    """Start the folder, let the loop turn `iterations` times, cancel it; the task, once it
    ended or the polls ran out."""
    task = asyncio.create_task(folder.run())
    for _ in range(iterations):
        await asyncio.sleep(0)
    task.cancel()
    for _ in range(_POLLS):
        if task.done():
            break
        await asyncio.sleep(0.001)
    return task


async def test_a_cancelled_folder_ends_wherever_the_cancel_lands(store: Stores) -> None:
    cards = RateCards(store)
    await cards.put("default", msgspec.convert(TEST_CARD, RateCardIn))
    ingestor = Ingestor(store, cards)
    # No pause between rounds: the folder talks to the store all the time.
    folder = Folder(store, interval=0, every_project=True)
    for offset in range(_OFFSETS):
        # A batch to fold in each trial, so that the fold's script runs in the sweep.
        items, _ = decode_events(msgspec.json.encode([event(f"c{offset}", "1")]), JSON)
        assert (await ingestor.ingest(items, ADMIN)).accepted == 1
        task = await _cancel_after(folder, offset)
        ended = task.done()
        if not ended:
            await _stop(task)  # so that it folds nothing into the tests that follow
        assert ended, f"a folder kept running after its cancel at iteration {offset}"
        if not task.cancelled():
            task.result()  # a folder ends by its cancel, not by an error


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel again and again until the task ends (a cancel may be dropped again)."""
    for _ in range(_POLLS):
        task.cancel()
        await asyncio.sleep(0.001)
        if task.done():
            return


async def test_a_folder_whose_rounds_fail_ends_when_cancelled() -> None:
    """Every round fails (no server there: listing the projects raises, the folder logs it
    and tries again next round); a cancel at any point of that still ends it."""
    away = Stores.from_url(f"redis://127.0.0.1:{free_port()}")
    try:
        folder = Folder(away, interval=0, every_project=True)
        for offset in range(0, 60, 3):
            task = await _cancel_after(folder, offset)
            assert task.done(), f"a failing folder kept running after its cancel at {offset}"
            assert task.cancelled()
    finally:
        await away.close()
