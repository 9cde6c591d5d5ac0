"""Type stub for the compiled ingest pass ``costcore/_columns.pyx``."""

from collections.abc import Container, Mapping, Sequence
from typing import Any

from costcore.columns import ScanResult

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
