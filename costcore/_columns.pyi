"""Type stub for the compiled ingest pass ``costcore/_columns.pyx``."""

from array import array
from collections.abc import Container, Hashable, Mapping, Sequence
from typing import Any

from costcore.columns import CodedEntry, CodedGroups, ScanResult

def scan_events(
    events: Sequence[Any],
    quantities: Mapping[str, int],
    min_epoch_us: int,
    max_epoch_us: int,
    shards: int,
    projects: Container[str],
    labels: Container[str],
    tag_keys: Container[str],
    tag_values: Container[str],
) -> ScanResult: ...
def dictionary_encode(values: Sequence[Hashable]) -> tuple[list[Any], array[int]]: ...

class CodedSums:
    def __init__(
        self,
        radices: Sequence[int],
        day0: int,
        days: int,
        hour0: int,
        hours: int,
        hour_class: Sequence[int],
    ) -> None: ...
    def add(self, entry: CodedEntry) -> None: ...
    def result(self) -> CodedGroups: ...

def coded_sums_for(entries: Sequence[CodedEntry], hour_class: Sequence[int]) -> CodedSums: ...
def group_coded(entries: Sequence[CodedEntry], hour_class: Sequence[int]) -> CodedGroups: ...
def rate_rows(
    skus: Sequence[str],
    epoch_us: Sequence[int],
    starts: Sequence[int],
    tables: Sequence[Mapping[str, int]],
) -> array[int]: ...
def pair_codes(
    firsts: Sequence[int], seconds: Sequence[Hashable], wanted: Sequence[bool]
) -> tuple[list[tuple[int, Any]], array[int]]: ...
def remap_codes(codes: Sequence[int], table: Sequence[int]) -> array[int]: ...
def group_positions(keys: Sequence[int], nkeys: int) -> tuple[array[int], array[int]]: ...
def take(values: Sequence[Any], positions: Sequence[int]) -> list[Any]: ...
def scan_wire_events(
    events: Sequence[Any],
    quantities: Mapping[Any, int],
    min_epoch_us: int,
    max_epoch_us: int,
    shards: int,
    projects: Container[str],
    labels: Container[str],
    tag_keys: Container[str],
    tag_values: Container[str],
) -> ScanResult: ...
def parse_time(text: object) -> int | None: ...
def json_array_length(body: bytes, limit: int) -> int: ...
def text_line_count(body: bytes, limit: int) -> int: ...
