"""The spool on disk: what `put` leaves, several writers at once, one drainer at a time."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
from decimal import Decimal
from pathlib import Path

import pytest
from trainledger.client import Spool, SpoolBusy

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
