"""The incremental CSV reader: however a file is cut into chunks (and whether gzip), it gives
the records `csv` reads from the whole text; and it holds one record at a time, not the file."""

from __future__ import annotations

import csv
import gzip
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trainledger.bills.focus import BillError
from trainledger.bills.reading import CsvRecords

CELL = st.text(alphabet=st.sampled_from('ab ,"\n\r€é1.-'), max_size=8)
ROWS = st.lists(st.lists(CELL, min_size=1, max_size=4), min_size=1, max_size=8)


def _written(rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    return out.getvalue().encode()


def _read(data: bytes, cuts: list[int]) -> list[list[str]]:
    reader = CsvRecords()
    records: list[list[str]] = []
    start = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        records.extend(reader.feed(data[start:cut]))
        start = cut
    records.extend(reader.feed(data[start:]))
    records.extend(reader.finish())
    return records


def _expected(data: bytes) -> list[list[str]]:
    text = data.decode()
    return [r for r in csv.reader(io.StringIO(text, newline="")) if r]


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=6))
def test_any_chunking_reads_as_the_whole_file(rows: list[list[str]], cuts: list[int]) -> None:
    data = _written(rows)
    expected = _expected(data)
    assert _read(data, cuts) == expected
    assert _read(gzip.compress(data), cuts) == expected


def test_the_digest_is_of_the_content_not_of_its_compression() -> None:
    data = _written([["a", "b"], ["1", "2"]])
    plain, packed = CsvRecords(), CsvRecords()
    list(plain.feed(data))
    list(plain.finish())
    list(packed.feed(gzip.compress(data)))
    list(packed.finish())
    assert plain.digest.hexdigest() == packed.digest.hexdigest()
    assert (plain.size, packed.size) == (len(data), len(gzip.compress(data)))


def test_a_record_is_yielded_once_its_line_arrives() -> None:
    """Bounded memory: a record leaves the reader as soon as it is whole (not at the end)."""
    reader = CsvRecords()
    assert list(reader.feed(b"a,b\n1,")) == [["a", "b"]]
    assert list(reader.feed(b'"x\ny"\n2')) == [["1", "x\ny"]]
    assert list(reader.finish()) == [["2"]]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'a,b\n"open,1\n', "a quoted field is not closed"),
        (b"a,b\n\xff\xfe,1\n", "not UTF-8 text"),
        (gzip.compress(b"a,b\n1,2\n", mtime=0)[:-9], "the gzip stream ends early"),
        (b"\x1f\x8b" + b"not gzip at all", "not a valid gzip stream"),
    ],
)
def test_a_broken_file_is_a_bill_error(data: bytes, reason: str) -> None:
    reader = CsvRecords()
    with pytest.raises(BillError, match=reason):
        list(reader.feed(data))
        list(reader.finish())
