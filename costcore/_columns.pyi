"""Type stub for the compiled ingest pass ``costcore/_columns.pyx``."""

from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

from costcore.columns import GroupResult, ScanResult

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
def group_events(
    events: Sequence[Any],
    rows: Sequence[int],
    day: Sequence[int],
    epoch_us: Sequence[int],
    tag_text: Callable[[dict[str, str]], str],
) -> GroupResult: ...
