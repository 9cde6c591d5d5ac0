"""The spool on disk: what `put` leaves, several writers at once, one drainer at a time."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
import time
from decimal import Decimal
from pathlib import Path

import pytest
from trainledger.client import Client, Spool, SpoolBusy
from trainledger.client.spool import STALE_TMP_SECONDS

from tests.conftest import free_port
from tests.small_fs import FILLER, fill, unfill


def _writer(directory: str, worker: int, count: int) -> None:
    spool = Spool(directory)
    for n in range(count):
        spool.put([{"id": f"w{worker}-{n}-{k}", "quantity": "1"} for k in range(3)])


def test_put_leaves_one_complete_file_per_call(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    spool.put([{"id": "a", "quantity": Decimal("1.5"), "tags": {"k": "v"}}, {"id": "b"}])
    spool.put([{"id": "c"}])
    spool.put([])  # nothing to keep: no file
    files = spool.files()
    assert len(files) == 2
    assert [json.loads(line) for line in files[0].read_text().splitlines()] == [
        {"id": "a", "quantity": "1.5", "tags": {"k": "v"}},
        {"id": "b"},
    ]
    assert spool.pending() == 3
    assert list((tmp_path / "spool" / "tmp").iterdir()) == []


def test_several_processes_put_at_once(tmp_path: Path) -> None:
    directory = str(tmp_path / "spool")
    Spool(directory)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(directory, w, 25)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
        assert w.exitcode == 0
    spool = Spool(directory)
    ids = [
        json.loads(line)["id"] for path in spool.files() for line in path.read_text().splitlines()
    ]
    assert len(spool.files()) == 100
    assert sorted(ids) == sorted(
        f"w{w}-{n}-{k}" for w in range(4) for n in range(25) for k in range(3)
    )


def test_an_event_without_an_id_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    with pytest.raises(ValueError, match="event 1"):
        spool.put([{"id": "a"}, {"quantity": "1"}])
    with pytest.raises(ValueError):
        spool.put([{"id": 7}])
    assert spool.files() == []


def test_one_drainer_at_a_time(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    with spool.draining(), pytest.raises(SpoolBusy), Spool(tmp_path).draining():
        pass
    with spool.draining():  # released when the first one ended
        pass


def test_a_hook_importing_the_spool_does_not_load_the_http_client() -> None:
    # A Slurm hook imports the spool to `put` and exits: httpx and the event model are the
    # bulk of the client's import time, and `put` needs neither.
    import subprocess
    import sys

    probe = (
        "import sys, trainledger.client.spool; "
        "print(sorted({'httpx', 'trainledger.events.model'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_put_on_a_full_disk_raises_and_leaves_nothing_behind(small_fs: Path) -> None:
    spool = Spool(small_fs / "spool")
    spool.put([{"id": "before", "quantity": "1"}])
    fill(small_fs)
    for n in range(20):  # a hook retried on a full disk: every try fails, none leaves a file
        with pytest.raises(OSError) as full:
            spool.put([{"id": f"full-{n}", "quantity": "1"}])
        assert full.value.errno == errno.ENOSPC
    assert list(spool.tmp.iterdir()) == []
    # Room for part of a big put: a write takes what fits and says how much. The put raises
    # rather than leave a cut file in new/ (its last event truncated, the rest lost).
    filler = small_fs / FILLER
    os.truncate(filler, filler.stat().st_size - 16_384)
    with pytest.raises(OSError) as partly:
        spool.put([{"id": f"big-{n}", "quantity": "1", "pad": "x" * 100} for n in range(1_000)])
    assert partly.value.errno == errno.ENOSPC
    assert list(spool.tmp.iterdir()) == []
    assert [json.loads(line)["id"] for f in spool.files() for line in f.read_bytes().split()] == [
        "before"
    ]
    unfill(small_fs)
    spool.put([{"id": "after", "quantity": "1"}])
    assert spool.pending() == 2


def _put_forever(directory: str) -> None:
    spool = Spool(directory)
    n = 0
    while True:
        spool.put([{"id": f"k-{n}-{k}", "pad": "x" * 200} for k in range(100)])
        n += 1


def test_a_caller_killed_mid_put_leaves_only_whole_files_in_new(tmp_path: Path) -> None:
    directory = str(tmp_path / "spool")
    spool = Spool(directory)
    writer = multiprocessing.get_context("spawn").Process(target=_put_forever, args=(directory,))
    writer.start()
    try:
        for _ in range(2000):  # a bound on waiting, never an assertion about speed
            if len(spool.files()) >= 5:
                break
            time.sleep(0.005)
    finally:
        os.kill(writer.pid or 0, signal.SIGKILL)  # as an OOM killer would: mid-write, likely
        writer.join(timeout=60)
    files = spool.files()
    assert len(files) >= 5
    for path in files:  # each file in new/ is a whole put: every event, every line whole
        assert [json.loads(line)["id"].split("-")[2] for line in path.read_bytes().split()] == [
            str(k) for k in range(100)
        ]
    assert len(list(spool.tmp.iterdir())) <= 1  # the put it was in, never counted
    assert spool.pending() == 100 * len(files)


def test_what_a_crashed_put_left_in_tmp_is_never_sent_and_goes_after_an_hour(
    tmp_path: Path,
) -> None:
    spool = Spool(tmp_path / "spool")
    fresh, stale = spool.tmp / "fresh.ndjson", spool.tmp / "stale.ndjson"
    for path in (fresh, stale):
        path.write_text('{"id": "half-written"}\n')
    (spool.tmp / "a-directory").mkdir()  # not ours to remove: no reason to stop either
    old = time.time() - STALE_TMP_SECONDS - 60
    for path in (stale, spool.tmp / "a-directory"):
        os.utime(path, (old, old))
    assert spool.pending() == 0
    # Nothing in new/: the drain posts nothing, so no service is needed.
    with Client(f"http://127.0.0.1:{free_port()}", "tl_unused") as client:
        report = spool.drain(client)
    assert report.events == 0 and report.requests == 0
    assert sorted(p.name for p in spool.tmp.iterdir()) == ["a-directory", "fresh.ndjson"]
