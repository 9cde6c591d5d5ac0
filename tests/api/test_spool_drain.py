"""The spool's drain against the real service when entries are bad: requests filled to the
batch size, a file with one refused event, entries that cannot be read, corrupt lines, a full
disk. One bad entry never
stops the others, nothing unreadable vanishes, and every event is counted once."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import httpx
import pytest
from trainledger.client import Client, Spool
from trainledger.client.spool import MAX_KEPT_BYTES

from tests.api.test_client import FAST, counted, ready
from tests.conftest import Api, event
from tests.small_fs import fill, unfill

# The drain is the client's: one Redis-protocol server is enough.
pytestmark = pytest.mark.parametrize("redis_url", ["valkey"], indirect=True)


def request_sizes(client: Client) -> list[int]:
    """The events in each POST /v1/events the client sends from now on."""
    sizes: list[int] = []

    def seen(request: httpx.Request) -> None:
        if request.method == "POST":
            sizes.append(len(request.content.splitlines()))

    client.http.event_hooks["request"].append(seen)
    return sizes


async def test_requests_are_filled_to_the_batch_size_across_files(api: Api, tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    for n in range(4):
        spool.put([event(f"b-{n}-{k}", "1") for k in range(3)])
    with ready(api) as client:
        sizes = request_sizes(client)
        report = spool.drain(client, batch_size=5)
        assert sizes == [5, 5, 2]  # not one request a file (3, 3, 3, 3)
        assert (report.accepted, report.files_sent, report.requests) == (12, 4, 3)
        assert spool.files() == [] and counted(client) == 12


async def test_a_refused_file_inside_a_full_request_is_set_aside_alone(
    api: Api, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool")
    spool.put([event(f"r-0-{k}", "1") for k in range(3)])
    spool.put([event(f"r-1-{k}", "1") for k in range(3)])
    spool.put([event("x-1", "1", project="other")])  # a project the token may not reach
    spool.put([event(f"r-3-{k}", "1") for k in range(3)])
    limited = await api.token("ingest", ["llm"])
    with ready(api) as admin, Client(api.base_url, limited, retry=FAST) as client:
        sizes = request_sizes(client)
        report = spool.drain(client, batch_size=5)
        # [r-0 ×3, r-1 ×2] sent; [r-1 ×1, x-1, r-3 ×3] refused, then each file alone.
        assert sizes == [5, 5, 1, 1, 3]
        assert (report.accepted, report.duplicates, report.files_failed) == (9, 0, 1)
        assert report.events == 9  # each event answered for once in the report
        assert sorted(p.name for p in spool.failed.iterdir())[0].endswith(".ndjson")
        assert spool.files() == [] and counted(admin) == 9


def one_refused_among(n: int, at: int) -> list[dict[str, object]]:
    """`n` events for the token's project, and at `at` one for a project it does not cover."""
    events = [event(f"m-{k}", "1") for k in range(n)]
    events.insert(at, event("m-bad", "1", project="other"))
    return events


async def test_a_file_with_one_refused_event_sets_aside_that_line_alone(
    api: Api, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool")
    spool.put(one_refused_among(19, at=7))  # one file of 20, as `Batcher.extend` writes
    spool.put([event(f"m-other-{k}", "1", project="other") for k in range(5)])
    spool.put([event("m-after", "1")])  # the files behind it are sent too
    [mixed, other, _] = spool.files()
    bad_line = mixed.read_bytes().splitlines()[7]
    limited = await api.token("ingest", ["llm"])
    with ready(api) as admin, Client(api.base_url, limited, retry=FAST) as client:
        sizes = request_sizes(client)
        report = spool.drain(client)
        # All 26 refused, then each file alone: the 403 names the project, so every event
        # of it is set aside at once (no request an event) and the rest is sent.
        assert sizes == [26, 20, 19, 5, 1]
        assert (report.accepted, report.duplicates, report.rejected) == (20, 0, [])
        assert (report.files_failed, report.events_refused, report.files_sent) == (2, 6, 1)
        assert spool.files() == [] and counted(admin) == 20
        assert (spool.failed / other.name).exists()  # all refused: the file set aside whole
        # Only the refused line is set aside, as it was, under the file's name.
        assert (spool.failed / mixed.name).read_bytes() == bad_line + b"\n"
        note = json.loads((spool.failed / (mixed.name + ".problem.json")).read_text())
        assert (note["status"], note["count"]) == (403, 1)
        assert [e["id"] for e in note["events"]] == ["m-bad"]
        assert "1 of the 20 events" in note["detail"] and "project 'other'" in note["detail"]
        listed = [(e.name, e.kind, e.events) for e in spool.set_aside()]
        assert listed == [(mixed.name, "refused", 1), (other.name, "refused", 5)]
        again = spool.drain(client)  # nothing left to send, nothing counted twice
        assert again.events == 0 and counted(admin) == 20


async def test_a_refused_file_with_corrupt_lines_sets_aside_only_the_refused_event(
    api: Api, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool")
    spool.put([event("c-bad", "1", project="other")])
    [path] = spool.files()
    refused = path.read_bytes()
    path.write_bytes(refused + b"garbage\n")
    limited = await api.token("ingest", ["llm"])
    with ready(api), Client(api.base_url, limited, retry=FAST) as client:
        report = spool.drain(client)
        assert (report.events_refused, report.corrupt_lines, report.events) == (1, 1, 0)
        assert spool.files() == []
        assert (spool.failed / path.name).read_bytes() == refused  # not the garbage again
        assert (spool.failed / (path.name + ".corrupt")).read_bytes() == b"garbage\n"


async def test_a_drainer_dying_mid_split_loses_nothing_and_counts_nothing_twice(
    api: Api, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool")
    spool.put(one_refused_among(19, at=12))
    [mixed] = spool.files()
    original = mixed.read_bytes()
    limited = await api.token("ingest", ["llm"])

    class Died(Exception):
        pass

    posts: list[int] = []

    def dies_at_the_fourth_post(request: httpx.Request) -> None:
        posts.append(len(request.content.splitlines()))
        if len(posts) == 4:
            raise Died

    with ready(api) as admin, Client(api.base_url, limited, retry=FAST) as client:
        client.http.event_hooks["request"].append(dies_at_the_fourth_post)
        with pytest.raises(Died):
            spool.drain(client, batch_size=8)
        # 8 sent; 8 refused, split: the 7 good sent; dead before the last 4 were posted,
        # the refused event known only to the dead drainer.
        assert posts == [8, 8, 7, 4] and counted(admin) == 15
        assert spool.files() == [mixed] and mixed.read_bytes() == original  # still all there
        assert list(spool.failed.iterdir()) == []
        client.http.event_hooks["request"].clear()
        report = spool.drain(client)  # the next drain: the rest sent, the sent ones again
        assert (report.accepted, report.duplicates) == (4, 15)  # the 15 sent: counted nothing
        assert report.events_refused == 1 and spool.files() == []
        assert counted(admin) == 19  # each counted once
        assert len((spool.failed / mixed.name).read_bytes().splitlines()) == 1


async def test_unreadable_entries_are_set_aside_and_the_others_sent(
    api: Api, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool")
    # Named to sort first: they are what a drain meets before the good files.
    (spool.new / "0-a-directory.ndjson").mkdir()
    (spool.new / "0-a-directory.ndjson" / "inside").write_text('{"id": "in-dir"}\n')
    os.mkfifo(spool.new / "0-b-fifo.ndjson")  # a blocking open would hang the drain
    (spool.new / "0-c-dangling.ndjson").symlink_to(tmp_path / "missing")
    outside = tmp_path / "elsewhere.ndjson"
    outside.write_text(json.dumps(event("from-elsewhere", "1")) + "\n")
    (spool.new / "0-d-link.ndjson").symlink_to(outside)  # not followed: not sent, not copied
    expected = {"0-a-directory.ndjson", "0-b-fifo.ndjson", "0-c-dangling.ndjson"}
    expected.add("0-d-link.ndjson")
    if os.geteuid() != 0:  # root reads any file: another owner's file is unreadable only here
        denied = spool.new / "0-e-denied.ndjson"
        denied.write_text(json.dumps(event("denied", "1")) + "\n")
        denied.chmod(0)
        expected.add(denied.name)
    for n in range(3):
        spool.put([event(f"u-{n}-{k}", "1") for k in range(2)])
    assert spool.pending() == 6  # counting does not stop at them either
    with ready(api) as client:
        report = spool.drain(client, batch_size=4)
        assert (report.accepted, report.files_sent) == (6, 3)
        assert report.files_unreadable == len(expected) and report.files_left == 0
        assert sorted(n.split(":")[0] for n in report.notes) == sorted(expected)
        assert spool.files() == []
        kept = {p.name for p in spool.failed.iterdir()}
        assert kept == expected | {name + ".problem.json" for name in expected}
        notes = {
            name: json.loads((spool.failed / (name + ".problem.json")).read_text())["detail"]
            for name in expected
        }
        assert "a directory" in notes["0-a-directory.ndjson"]
        assert "a FIFO" in notes["0-b-fifo.ndjson"]
        assert "a symbolic link" in notes["0-d-link.ndjson"]
        assert outside.read_text().startswith('{"id": "from-elsewhere"')  # untouched
        assert counted(client) == 6  # neither the link's target nor the directory's file


async def test_corrupt_lines_are_kept_counted_and_the_readable_events_sent(
    api: Api, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool")
    spool.put([event(f"c-{k}", "1") for k in range(3)])
    mixed = spool.files()[0]
    good = mixed.read_bytes().splitlines()
    truncated = good[0][:40]  # a line cut short (a disk error, a hand-made file)
    garbage = [truncated, b"garbage \xff\xfe not utf-8", b"[1, 2, 3]", b'"a string"']
    mixed.write_bytes(b"\n".join([good[0], garbage[0], good[1], *garbage[1:], good[2]]) + b"\n")
    binary = spool.new / "0-binary.ndjson"
    binary.write_bytes(bytes(range(256)) * 8)  # no event in it at all
    huge = spool.new / "0-huge.ndjson"
    huge.write_bytes(b"\x00" * (MAX_KEPT_BYTES + 50_000))  # kept only up to the bound
    with ready(api) as client:
        report = spool.drain(client)
        assert (report.accepted, report.rejected, report.files_sent) == (3, [], 1)
        lines_of_binary = 9  # 8 newlines in it, a line after the last
        assert report.corrupt_lines == len(garbage) + lines_of_binary + 1
        assert spool.files() == []
        kept = (spool.failed / (mixed.name + ".corrupt")).read_bytes()
        assert kept == b"\n".join(garbage) + b"\n"  # the raw bytes, as they were
        note = json.loads((spool.failed / (mixed.name + ".corrupt.problem.json")).read_text())
        assert note["count"] == 4 and [line["line"] for line in note["lines"]] == [2, 4, 5, 6]
        assert "not a JSON object" in note["lines"][0]["reason"]
        assert (spool.failed / "0-binary.ndjson.corrupt").read_bytes().startswith(b"\x00\x01")
        huge_kept = (spool.failed / "0-huge.ndjson.corrupt").read_bytes()
        assert len(huge_kept) == MAX_KEPT_BYTES
        huge_note = json.loads((spool.failed / "0-huge.ndjson.corrupt.problem.json").read_text())
        assert huge_note["bytes"] == MAX_KEPT_BYTES + 50_001 and huge_note["count"] == 1
        assert huge_note["kept_bytes"] == MAX_KEPT_BYTES
        assert counted(client) == 3
        again = spool.drain(client)  # nothing is counted twice: the files are gone
        assert (again.events, again.corrupt_lines) == (0, 0)


async def test_a_full_disk_leaves_the_file_to_set_aside_and_drains_the_others(
    api: Api, small_fs: Path
) -> None:
    spool = Spool(small_fs / "spool")
    spool.put([event("x-full", "1", project="other")])  # first: refused, to be set aside
    for n in range(3):
        spool.put([event(f"f-{n}-{k}", "1") for k in range(3)])
    refused = spool.files()[0]
    fill(small_fs)
    limited = await api.token("ingest", ["llm"])
    with ready(api) as admin, Client(api.base_url, limited, retry=FAST) as client:
        report = spool.drain(client)
        assert (report.accepted, report.files_sent) == (9, 3)
        assert (report.files_failed, report.files_left) == (0, 1)
        assert "No space left on device" in report.notes[0] and "left in new/" in report.notes[0]
        assert spool.files() == [refused]
        assert list(spool.failed.iterdir()) == []  # no empty note left behind
        assert list(spool.tmp.iterdir()) == []
        assert counted(admin) == 9
        fill(small_fs)  # the drained files' space, taken again
        again = spool.drain(client)  # and again: no crash, the same file left
        assert (again.files_left, again.events) == (1, 0)
        with pytest.raises(OSError) as full:
            spool.put([event("late", "1")])
        assert full.value.errno == errno.ENOSPC
        assert list(spool.tmp.iterdir()) == [] and list(spool.failed.iterdir()) == []
        unfill(small_fs)  # room again: the next drain sets it aside, with the whole answer
        last = spool.drain(client)
        assert (last.files_failed, last.files_left) == (1, 0)
        note = json.loads((spool.failed / (refused.name + ".problem.json")).read_text())
        assert note["status"] == 403
        assert spool.files() == [] and counted(admin) == 9
